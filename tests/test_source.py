import os

import pytest
from PIL import Image

from datakit.conversion.sources.folder import scan_folder
from datakit.errors import SourceError


def touch_image(path, fmt="PNG"):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (2, 2)).save(path, format=fmt)


def test_classes_sorted_files_found_recursively_any_case(tmp_path):
    touch_image(tmp_path / "zebra" / "a.PNG")
    touch_image(tmp_path / "ant" / "deep" / "er" / "b.JpEg", "JPEG")
    touch_image(tmp_path / "ant" / "a.tiff", "TIFF")
    (tmp_path / "ant" / "notes.txt").write_text("not an image")
    (tmp_path / "README").write_text("outside any class")
    folder = scan_folder(tmp_path)
    assert folder.classes == ["ant", "zebra"]
    assert [(e.path, e.label) for e in folder.entries] == [
        ("ant/a.tiff", 0), ("ant/deep/er/b.JpEg", 0), ("zebra/a.PNG", 1)]
    assert sorted(folder.ignored) == ["README", "ant/notes.txt"]


def test_unicode_names(tmp_path):
    touch_image(tmp_path / "café" / "ねこ 1.png")
    folder = scan_folder(tmp_path)
    assert folder.classes == ["café"] and folder.entries[0].path == "café/ねこ 1.png"


def test_empty_classes_are_kept_and_reported(tmp_path):
    touch_image(tmp_path / "b" / "x.png")
    (tmp_path / "a").mkdir()
    folder = scan_folder(tmp_path)
    assert folder.classes == ["a", "b"] and folder.entries[0].label == 1
    assert folder.empty_classes() == ["a"]


def test_symlink_loops_terminate(tmp_path):
    touch_image(tmp_path / "a" / "x.png")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a")
    assert [e.path for e in scan_folder(tmp_path).entries] == ["a/x.png"]


def test_missing_or_imageless_folders_are_source_errors(tmp_path):
    with pytest.raises(SourceError, match="not a directory"):
        scan_folder(tmp_path / "missing")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_text("hi")
    with pytest.raises(SourceError, match="no images found"):
        scan_folder(tmp_path)


# ImageFolder fidelity: torchvision's rules, re-stated (torchvision is not importable here).
TORCHVISION_IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def imagefolder_samples(root, extensions=TORCHVISION_IMG_EXTENSIONS):
    """torchvision ``datasets/folder.py``: ``find_classes`` then ``make_dataset``, as documented."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    samples = []
    for label, name in enumerate(classes):
        for directory, _, fnames in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(directory, fname)
                if path.lower().endswith(extensions):
                    samples.append((os.path.relpath(path, root).replace(os.sep, "/"), label))
    return classes, samples


def nested_tree(root, outside):
    """Nested sub-folders whose sorted walk differs from sorted paths, mixed case, unicode,
    hidden files, a GIF, symlinked files and folders (inside and outside the root)."""
    for relative in ("cat/b.png", "cat/A.JPG", "cat/Z.Png", "cat/sub/x.jpg", "cat/sub-2/y.jpeg",
                     "cat/sub/deeper/z.bmp", "cat/sub0/w.webp", "cat/.hidden.png", "cat/Ünï/ç.TIFF",
                     "cat/anim.gif", "cat/notes.txt", "cat/zz.png", "dog/ねこ.png", "dog/1/2.pgm",
                     "dog/10/3.ppm", "dog/1 0/4.tif", "Bird/zz.png"):
        touch_image(root / relative, {".gif": "GIF", ".tiff": "TIFF", ".tif": "TIFF", ".jpg": "JPEG",
                                      ".jpeg": "JPEG", ".bmp": "BMP", ".webp": "WEBP", ".pgm": "PPM",
                                      ".ppm": "PPM"}.get(os.path.splitext(relative)[1].lower(), "PNG"))
    touch_image(outside / "shared" / "s.png")
    touch_image(outside / "linked_class" / "l.jpg", "JPEG")
    (root / "cat" / "sub" / "link.png").symlink_to(root / "dog" / "ねこ.png")  # a symlinked file
    (root / "dog" / "shared").symlink_to(outside / "shared")  # a symlinked folder, outside the root
    (root / "dog" / "again").symlink_to(root / "cat" / "sub")  # the same folder reached twice
    (root / "elk").symlink_to(outside / "linked_class")  # a symlinked class folder
    (root / "loose.png").write_bytes(b"outside any class")


def test_order_file_set_and_labels_are_imagefolders(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    nested_tree(root, outside)
    classes, samples = imagefolder_samples(root)
    folder = scan_folder(root)
    assert folder.classes == classes == ["Bird", "cat", "dog", "elk"]
    assert [(entry.path, entry.label) for entry in folder.entries] == samples
    paths = [path for path, _ in samples]
    # a sorted walk, not sorted paths: a folder's files before its sub-folders', folders in string order
    assert paths.index("cat/zz.png") < paths.index("cat/sub/x.jpg") < paths.index("cat/sub-2/y.jpeg") \
        < paths.index("cat/sub/deeper/z.bmp")
    assert "cat/anim.gif" not in paths and "cat/anim.gif" in folder.ignored


def test_extensions_add_to_imagefolders_set(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    nested_tree(root, outside)
    extra = (".gif", ".txt")
    folder = scan_folder(root, extensions=["GIF", ".TXT"])  # the dot is optional, the case is not kept
    assert [(e.path, e.label) for e in folder.entries] == imagefolder_samples(
        root, TORCHVISION_IMG_EXTENSIONS + extra)[1]
    assert "cat/anim.gif" in [e.path for e in folder.entries]
    with pytest.raises(ValueError, match="extension"):
        scan_folder(root, extensions=[""])


def test_a_symlink_loop_is_walked_once_and_siblings_stay_in_imagefolder_order(tmp_path):
    touch_image(tmp_path / "a" / "x.png")
    touch_image(tmp_path / "a" / "sub" / "y.png")
    (tmp_path / "a" / "sub" / "up").symlink_to(tmp_path / "a")  # a loop: ImageFolder would recurse
    (tmp_path / "a" / "twin").symlink_to(tmp_path / "a" / "sub", target_is_directory=True)
    assert [e.path for e in scan_folder(tmp_path).entries] == ["a/x.png", "a/sub/y.png", "a/twin/y.png"]


def test_a_symlink_up_to_the_root_or_above_is_not_followed_and_is_listed(tmp_path):
    root = tmp_path / "photos"
    touch_image(root / "cat" / "x.png")
    touch_image(root / "dog" / "y.png")
    (root / "cat" / "loop").symlink_to("..")  # ln -s .. photos/cat/loop: ImageFolder stores dog/ under cat
    (root / "dog" / "deep").mkdir()
    (root / "dog" / "deep" / "up").symlink_to("../../..")  # above the root: everything again, and more
    (root / "dog" / "self").symlink_to(".")
    folder = scan_folder(root)
    assert [(e.path, e.label) for e in folder.entries] == [("cat/x.png", 0), ("dog/y.png", 1)]
    assert [(item.path, item.target) for item in folder.loops] == [
        ("cat/loop", "."), ("dog/deep/up", str(tmp_path)), ("dog/self", "dog")]


def test_hidden_folders_are_classes_as_in_imagefolder_and_are_named(tmp_path):
    touch_image(tmp_path / ".ipynb_checkpoints" / "x-checkpoint.png")
    touch_image(tmp_path / "cat" / "x.png")
    touch_image(tmp_path / "cat" / ".cache" / "y.png")
    folder = scan_folder(tmp_path)
    assert folder.classes == [".ipynb_checkpoints", "cat"] == imagefolder_samples(tmp_path)[0]
    assert folder.hidden_classes() == [".ipynb_checkpoints"]

import pytest
from PIL import Image

from datakit.errors import SourceError
from datakit.source import scan_folder


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

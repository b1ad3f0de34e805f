"""default_collate and default_convert behave as torch's."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from PIL import Image

import datakit
from tests.loader._loader_helpers import assert_same

Pair = collections.namedtuple("Pair", ["a", "b"])

BATCHES = {
    "tensors": [torch.arange(3), torch.arange(3) + 1],
    "numpy": [np.ones((2, 2), dtype=np.float32), np.zeros((2, 2), dtype=np.float32)],
    "numpy-scalars": [np.float64(1.5), np.float64(2.5)],
    "numpy-bools": [np.bool_(True), np.bool_(False)],
    "ints": [1, 2, 3],
    "bools": [True, False],
    "floats": [0.5, 1.5],
    "strings": ["a", "b"],
    "bytes": [b"a", b"b"],
    "dicts": [{"x": 1, "y": "p"}, {"x": 2, "y": "q"}],
    "ordered-dicts": [collections.OrderedDict(x=1.0), collections.OrderedDict(x=2.0)],
    "namedtuples": [Pair(1, torch.zeros(2)), Pair(2, torch.ones(2))],
    "tuples": [(1, "a"), (2, "b")],
    "lists": [[1, 2], [3, 4]],
    "nested": [{"p": [Pair(np.int32(1), 2.0)]}, {"p": [Pair(np.int32(3), 4.0)]}],
}


UNSUPPORTED_TENSORS = {
    "nested": lambda: torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]),
    "sparse-coo": lambda: torch.eye(3).to_sparse(),
    "sparse-csr": lambda: torch.eye(3).to_sparse_csr(),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED_TENSORS))
@pytest.mark.filterwarnings("ignore:.*(prototype stage|beta state):UserWarning")  # torch's notices
def test_unsupported_tensor_layouts_raise_torchs_error(name):
    batch = [UNSUPPORTED_TENSORS[name](), UNSUPPORTED_TENSORS[name]()]
    with pytest.raises(RuntimeError) as theirs:
        tud.default_collate(batch)
    with pytest.raises(RuntimeError) as ours:
        datakit.default_collate(batch)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("name", list(BATCHES))
def test_default_collate_matches_torch(name):
    batch = BATCHES[name]
    assert_same(tud.default_collate(batch), datakit.default_collate(batch))


@pytest.mark.parametrize("name", list(BATCHES))
def test_default_convert_matches_torch(name):
    for sample in BATCHES[name]:
        assert_same(tud.default_convert(sample), datakit.default_convert(sample))


@pytest.mark.parametrize(
    "sample",
    [np.array(["a", "b"]), np.array([object()], dtype=object), np.str_("s"), "text", 3, None],
)
def test_default_convert_leaves_other_values(sample):
    assert datakit.default_convert(sample) is sample


def test_uneven_sequences_raise():
    with pytest.raises(RuntimeError, match="equal size"):
        datakit.default_collate([[1, 2], [3]])


def test_string_arrays_and_unknown_types_raise_type_error():
    with pytest.raises(TypeError, match="batch must contain"):
        datakit.default_collate([np.array(["a"]), np.array(["b"])])
    with pytest.raises(TypeError, match="batch must contain"):
        datakit.default_collate([object(), object()])


def test_pil_image_says_how_to_fix():
    images = [Image.new("RGB", (2, 2)), Image.new("RGB", (2, 2))]
    with pytest.raises(TypeError, match='output="tensor"') as caught:
        datakit.default_collate(images)
    assert "transform" in str(caught.value)


def test_collate_in_main_process_is_not_shared():
    assert not datakit.default_collate([torch.zeros(2), torch.ones(2)]).is_shared()


def test_collate_in_worker_uses_shared_memory():
    loader = datakit.DataLoader(
        range(4),
        batch_size=2,
        num_workers=1,
        collate_fn=lambda batch: datakit.default_collate([torch.tensor([i]) for i in batch]).is_shared(),
    )
    assert list(loader) == [True, True]


class MixedSizeImages(tud.Dataset):
    """Eight 3x4x4 uint8 images, except sample ``odd``, 3x6x4: photos that decode to two sizes."""

    def __init__(self, odd: int) -> None:
        self.odd = odd

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.zeros(3, 6 if index == self.odd else 4, 4, dtype=torch.uint8), index


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("odd", [0, 2], ids=["first-larger", "later-larger"])
def test_images_of_mixed_sizes_name_both_and_say_how_to_fix(num_workers, odd):
    dataset = MixedSizeImages(odd)
    with pytest.raises(RuntimeError) as theirs:
        tud.default_collate([dataset[i] for i in range(4)])
    with pytest.raises(RuntimeError) as ours:
        next(iter(datakit.DataLoader(dataset, batch_size=4, num_workers=num_workers)))
    message = str(ours.value)
    del ours  # its traceback holds the iterator, and so its workers
    # torch's words first (in a worker too, where the batch is stacked into shared memory), so that
    # whatever matches torch's error matches this one
    assert message.startswith(str(theirs.value)), message
    position = 1 if odd == 0 else 2
    sizes = ("6x4", "4x4") if odd == 0 else ("4x4", "6x4")
    assert f"samples 0 and {position} of the batch are {sizes[0]} and {sizes[1]} images" in message
    assert "transform=datakit.vision.Compose([datakit.vision.RandomResizedCrop(224)" in message
    assert "datakit.vision.Resize((224, 224))" in message


def test_tensors_of_mixed_sizes_that_are_not_images_get_no_image_advice():
    with pytest.raises(RuntimeError, match=r"^stack expects each tensor to be equal size") as caught:
        datakit.default_collate([torch.zeros(3), torch.zeros(3), torch.zeros(5)])
    assert "entry 2" in str(caught.value) and "collate_fn" in str(caught.value)
    assert "datakit.vision" not in str(caught.value)

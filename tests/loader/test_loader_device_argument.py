"""``DataLoader(device=...)``: every value gets a message naming the device asked for."""

from __future__ import annotations

import warnings

import pytest
import torch

import datakit
from tests.loader._loader_datasets import RangeDataset


def build(device, **options):
    return datakit.DataLoader(RangeDataset(6), batch_size=4, device=device, **options)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def runtime_warnings(record) -> list[str]:
    return [str(warning.message) for warning in record if warning.category is RuntimeWarning]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_mps_without_mps_names_mps_not_cuda(no_gpu, num_workers):
    with pytest.warns(RuntimeWarning) as record:
        loader = build("mps", num_workers=num_workers)
    (message,) = runtime_warnings(record)
    assert "device='mps'" in message and "MPS is not available" in message and "CUDA" not in message
    assert [batch.tolist() for batch in loader] == [[0, 1, 2, 3], [4, 5]]
    assert all(batch.device.type == "cpu" for batch in loader)


def test_mps_where_mps_exists_says_staging_is_cuda_only(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    with pytest.warns(RuntimeWarning) as record:
        loader = build("mps")
    (message,) = runtime_warnings(record)
    assert "device='mps'" in message and "only to CUDA devices" in message and ".to('mps')" in message
    assert [batch.device.type for batch in loader] == ["cpu", "cpu"]


def test_a_cuda_index_without_cuda_names_the_index(no_gpu):
    with pytest.warns(RuntimeWarning, match=r"device='cuda:1'\): CUDA is not available"):
        loader = build("cuda:1")
    assert [batch.tolist() for batch in loader] == [[0, 1, 2, 3], [4, 5]]


def test_a_cuda_index_past_the_devices_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"device='cuda:1'.*1 CUDA device \(cuda:0\)"):
        build("cuda:1")


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_cpu_delivers_cpu_batches_silently(device):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = build(device)
        assert [batch.tolist() for batch in loader] == [[0, 1, 2, 3], [4, 5]]


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "", "cuda:-1"])
def test_an_invalid_device_name_is_a_value_error_naming_the_argument(device):
    with pytest.raises(ValueError, match=rf"DataLoader\(device={device!r}\): not a device"):
        build(device)


def test_a_device_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match=r"DataLoader\(device=\[0\]\)"):
        build([0])


@pytest.mark.parametrize("device", ["meta", "xpu"])
def test_a_device_type_datakit_cannot_stage_to_is_refused(device):
    with pytest.raises(ValueError, match=rf"device='{device}'.*only to CUDA devices"):
        build(device)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_real_cuda_indices():
    count = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"device='cuda:{count}'"):
        build(f"cuda:{count}")
    last = f"cuda:{count - 1}"
    assert {str(batch.device) for batch in build(last, num_workers=2)} == {last}

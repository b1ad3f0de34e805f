"""datakit.DataLoader inside PyTorch Lightning: torch's batches, mid-epoch resume, DDP shards.

Each test runs ``examples/lightning_train.py`` in real processes (Lightning's
DDP launcher starts the second rank itself) and reads the indices each rank
trained on. Skipped only where Lightning is not installed (the ``lightning``
extra; CI installs it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import datakit

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                       reason="PyTorch Lightning is not installed (pip install -e '.[lightning]')"),
]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "lightning_train.py"

# Lightning imports torchmetrics, which imports torchvision when it is installed; the test
# environment's torchvision (a CUDA wheel beside a CPU torch) imports only through the guard in
# tests/torchvision_ref.py. A sitecustomize applies it in every process of the run, the second
# rank that DDP's launcher starts included.
SITECUSTOMIZE = """
try:
    from tests.torchvision_ref import load_torchvision
    load_torchvision()
except Exception:
    pass
"""


def run_example(tmp_path: Path, *args: str) -> dict[int, list[list[int]]]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    record = tmp_path / f"seen-{len(list(tmp_path.glob('seen-*')))}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    command = [sys.executable, str(EXAMPLE), "--workdir", str(tmp_path / "work"), "--record", str(record)]
    subprocess.run([*command, *args], check=True, cwd=tmp_path, env=env, timeout=240, capture_output=True,
                   text=True)
    return {int(path.name.rsplit("rank", 1)[1].split(".")[0]): json.loads(path.read_text())
            for path in tmp_path.glob(f"{record.name}.rank*.json")}


def plain_loop_batches(tmp_path: Path) -> list[list[int]]:
    """What a plain loop over the same loader sees: the reference order."""
    dataset = datakit.LMDBDataset(tmp_path / "work" / "shapes.lmdb", output="bytes")
    loader = datakit.DataLoader(range(len(dataset)), batch_size=4, shuffle=True,
                                generator=torch.Generator().manual_seed(0))
    return [batch.tolist() for batch in loader]


def test_datakit_loader_is_a_torch_loader_and_keeps_torchs_frozen_attributes():
    loader = datakit.DataLoader(range(8), batch_size=4)
    assert isinstance(loader, torch.utils.data.DataLoader)
    with pytest.raises(ValueError, match="batch_size attribute should not be set after DataLoader"):
        loader.batch_size = 2
    loader.num_workers = 0  # not frozen in torch either


def test_a_fit_trains_on_the_batches_of_a_plain_loop_and_of_torchs_loader(tmp_path):
    with_datakit = run_example(tmp_path, "--loader", "datakit")[0]
    with_torch = run_example(tmp_path, "--loader", "torch")[0]
    assert with_datakit == plain_loop_batches(tmp_path)
    assert with_datakit == with_torch


def test_a_fit_stopped_mid_epoch_resumes_to_the_same_batches(tmp_path):
    whole = run_example(tmp_path)[0]
    first = run_example(tmp_path, "--stop-after", "5")[0]
    rest = run_example(tmp_path, "--resume", str(tmp_path / "work" / "mid-epoch.ckpt"))[0]
    assert first == whole[:5]
    assert rest == whole[5:]


def test_a_checkpoint_on_the_epochs_last_batch_resumes_at_the_next_epoch(tmp_path):
    whole = run_example(tmp_path)[0]
    last = run_example(tmp_path, "--stop-after", str(len(whole)))[0]
    assert last == whole
    rest = run_example(tmp_path, "--resume", str(tmp_path / "work" / "mid-epoch.ckpt"))
    assert rest[0] == []  # the epoch was complete: nothing is trained twice


def test_under_ddp_each_rank_reads_its_own_shard_as_with_torchs_loader(tmp_path):
    ddp = ("--devices", "2", "--strategy", "ddp", "--workers", "1")
    ours = run_example(tmp_path, *ddp)
    theirs = run_example(tmp_path, *ddp, "--loader", "torch")
    assert sorted(ours) == [0, 1]
    shards = [sorted(index for batch in ours[rank] for index in batch) for rank in (0, 1)]
    assert not set(shards[0]) & set(shards[1])  # disjoint
    assert sorted(shards[0] + shards[1]) == list(range(48))  # and covering
    assert ours == theirs


def test_a_loader_sharded_by_datakits_sampler_is_not_sharded_again_under_ddp(tmp_path):
    """datakit's DistributedSampler is a torch DistributedSampler, so Lightning leaves the loader as it is
    (before, Lightning sharded the shard again and each rank trained on half its share)."""
    ranks = run_example(tmp_path, "--devices", "2", "--strategy", "ddp", "--workers", "1",
                        "--loader", "datakit-sharded")
    assert sorted(ranks) == [0, 1] and all(len(ranks[rank]) == 6 for rank in (0, 1))  # 48 / 2 ranks / 4
    shards = [sorted(index for batch in ranks[rank] for index in batch) for rank in (0, 1)]
    assert not set(shards[0]) & set(shards[1]) and sorted(shards[0] + shards[1]) == list(range(48))

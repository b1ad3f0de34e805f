"""Kill a training run and resume it exactly, with the loader's state in the checkpoint.

The demo trains a small model three times on a generated image folder:

1. straight through, recording a digest of the final weights;
2. in a child process that checkpoints every 5 steps (model, optimiser and
   ``loader.state_dict()``) and is SIGKILLed at step 23, mid-epoch;
3. resumed from that checkpoint, with a different number of workers.

Because the resumed loader yields exactly the batches the uninterrupted run
would have yielded next, the resumed run ends with the very same weights.

    python examples/resume_training.py                 # in a temporary folder, deleted at the end
    python examples/resume_training.py --output DIR    # keeps the store and the checkpoint in DIR
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import tempfile

import torch
from torch import nn

import datakit
from datakit.tools.synthetic import make_image_folder

EPOCHS, BATCH, CHECKPOINT_EVERY = 3, 32, 5


def prepare(root: str) -> str:
    store = os.path.join(root, "shapes.lmdb")
    if not os.path.exists(store):
        make_image_folder(os.path.join(root, "shapes"), classes=["a", "b", "c", "d"], per_class=100,
                          size=(16, 16), image_format="PNG")
        datakit.convert(os.path.join(root, "shapes"), store, format="raw", workers=1)
    return store


def train(store: str, checkpoint: str, workers: int, resume: bool, kill_at: int | None) -> str:
    """Train, checkpointing as it goes; returns a digest of the final weights."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 64), nn.ReLU(), nn.Linear(64, 4))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = datakit.DataLoader(datakit.LMDBDataset(store, output="tensor"), batch_size=BATCH, shuffle=True,
                                num_workers=workers, generator=torch.Generator().manual_seed(42))
    step = 0
    if resume:
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        loader.load_state_dict(state["loader"])
        step = state["step"]
        print(f"  resumed at step {step}, epoch {loader.epoch}")
    for _ in range(loader.epoch, EPOCHS):  # each pass over the loader is the next epoch
        for images, labels in loader:
            optimiser.zero_grad()
            loss = nn.functional.cross_entropy(model(images.float() / 255), labels)
            loss.backward()
            optimiser.step()
            step += 1
            if step % CHECKPOINT_EVERY == 0:
                torch.save({"model": model.state_dict(), "optimiser": optimiser.state_dict(),
                            "loader": loader.state_dict(), "step": step}, checkpoint)
            if step == kill_at:
                print(f"  killed at step {step} (last checkpoint: step {step - step % CHECKPOINT_EVERY})",
                      flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    print(f"  finished at step {step}, loss {loss.item():.4f}")
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", "--root", metavar="DIR", default=None,
                        help="keep the store and the checkpoint here (default: a temporary folder, "
                             "deleted at the end)")
    parser.add_argument("--child", nargs=3, metavar=("STORE", "CHECKPOINT", "KILL_AT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # the run that gets killed
        store, checkpoint, kill_at = args.child
        train(store, checkpoint, workers=2, resume=False, kill_at=int(kill_at))
        return
    with (contextlib.nullcontext(args.output) if args.output else
          tempfile.TemporaryDirectory(prefix="datakit-resume-")) as root:
        os.makedirs(root, exist_ok=True)
        store, checkpoint = prepare(root), os.path.join(root, "checkpoint.pt")
        print("1. uninterrupted run (2 workers)")
        expected = train(store, checkpoint, workers=2, resume=False, kill_at=None)
        print("2. the same run, SIGKILLed mid-epoch")
        child = subprocess.run([sys.executable, __file__, "--child", store, checkpoint, "23"])
        assert child.returncode == -signal.SIGKILL, child.returncode
        print("3. resumed from the checkpoint (0 workers this time)")
        resumed = train(store, checkpoint, workers=0, resume=True, kill_at=None)
        print(f"weights: uninterrupted {expected}, resumed {resumed}: "
              f"{'identical' if resumed == expected else 'DIFFERENT'}")
        if resumed != expected:
            raise SystemExit(1)


if __name__ == "__main__":
    main()

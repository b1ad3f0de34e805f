"""Side-by-side loader benchmark: torch's ``DataLoader`` against datakit's.

Both loaders read the same store through the same dataset with the same
settings. With a photo pipeline (``pipeline="train"``: ``RandomResizedCrop(224)``
and a flip; ``"val"``: ``Resize(256)``, ``CenterCrop(224)``), torch's loader
runs torchvision's ``transforms.v2`` with each backend of torchvision's
reference, on PIL images (``torch``) and on uint8 tensors (``torch-tensor``),
what the pipeline replaces (or, where torchvision does not import,
``datakit.vision``'s operations unfused on tensors, which compute what
torchvision's do), datakit's loader runs the same pipeline fused into
decoding, and a fourth run measures the decode ceiling
(:mod:`datakit.tools.bench_contenders`).

Each run happens in a fresh child process, so that peak memory is
that run's alone and neither loader inherits the other's warm workers; runs
alternate (torch, datakit, torch, ...) so that neither profits from a quieter
moment of the machine, and medians are reported. ``datakit bench`` prints it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import resource
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from datakit.stores import resolve_store
from datakit.stores.contract import StoreSpec
from datakit.tools.bench_contenders import CEILING, compare, contenders, drop_pixels, tensor_backend_transform
from datakit.tools.torchvision_status import torchvision_problem

__all__ = ["LoaderRun", "BenchSettings", "PIPELINES", "run_benchmark", "baseline_transform", "pipeline_steps",
           "counted_epochs", "torchvision_problem"]

_STOP_GRACE = 10.0  # seconds a stopped run may take to finish its batch and shut its workers down
_TELL_SECONDS = 0.1  # a run tells the parent its count of samples at most this often


@dataclass(frozen=True)
class BenchSettings:
    """One benchmark's configuration.

    Attributes:
        store: a path or a ``mongodb://`` URI.
        backend_options: options naming the store there (``collection``,
            ``database``), as :func:`~datakit.stores.resolve_store` takes them.
    """

    store: str
    backend_options: Mapping[str, str] = field(default_factory=dict)
    batch_size: int = 256
    workers: int = 2
    epochs: int = 2
    output: str = "tensor"
    shuffle: bool = True
    pipeline: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The settings as ``datakit bench --json`` reports them, the backend options among them."""
        data = asdict(self)
        return {"store": data.pop("store"), **data.pop("backend_options"), **data}


@dataclass(frozen=True)
class LoaderRun:
    """What one loader did in one run.

    Attributes:
        loader: ``"torch"``, ``"torch-tensor"``, ``"datakit"`` or ``"decode-ceiling"``.
        samples: samples read over all epochs.
        seconds: wall time of all epochs, worker start-up included.
        steady_samples_per_second: samples/s over the epochs after the first
            (all epochs when there is one), i.e. with workers running.
        first_batch_seconds: from creating the iterator to holding the first batch.
        main_peak_mb: peak resident memory of the run's main process.
        worker_peak_mb: peak resident memory of its largest worker process.
        worker_start_method: how the loader started its workers (the caller's
            default: ``fork`` on Linux).
    """

    loader: str
    samples: int
    seconds: float
    steady_samples_per_second: float
    first_batch_seconds: float
    main_peak_mb: float
    worker_peak_mb: float
    worker_start_method: str


def run_benchmark(settings: BenchSettings, repeats: int = 3,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Alternate ``repeats`` runs of each loader; return the medians and ratios.

    ``progress(done, total)`` is called with the samples read over all the
    runs so far (a run tells its count a few times a second, only when
    ``progress`` is given: the runs measure nothing else), so that a caller
    can show how far the benchmark got.

    Besides the figures, the result says what they measure, so that a reader
    of the JSON alone is not misled: ``samples_per_second_counts`` (the
    epochs after the first; with one epoch, that epoch, start-up included)
    and, with a pipeline, ``baseline`` (what torch's loader ran),
    ``baseline_is_torchvision`` and ``baseline_note`` (why not, else ``None``),
    the ratios against each torchvision backend and the decode ceiling
    (:func:`datakit.tools.bench_contenders.compare`).
    """
    spec = resolve_store(settings.store, settings.backend_options)
    with spec.open_reader() as reader:
        manifest = reader.manifest
    mean_bytes = manifest.stats.total_bytes / max(1, manifest.length)
    loaders = contenders(settings.pipeline, settings.pipeline is not None and torchvision_problem() is None)
    runs: dict[str, list[LoaderRun]] = {name: [] for name in loaders}
    total, done = repeats * len(loaders) * settings.epochs * manifest.length, 0
    if progress is not None:
        progress(0, total)
    for _ in range(repeats):
        for name in loaders:
            told = None if progress is None else _offset(progress, done, total)
            runs[name].append(_run_in_child(name, spec, settings, told))
            done += runs[name][-1].samples
            if progress is not None:
                progress(done, total)
    summary: dict[str, Any] = {"store": spec.describe(), "records": manifest.length,
                               "settings": settings.to_dict(), "repeats": repeats,
                               "samples_per_second_counts": counted_epochs(settings.epochs), "loaders": {}}
    if settings.pipeline is not None:
        summary.update(_baseline_fields(settings.pipeline))
    for name, results in runs.items():
        rate = statistics.median(run.steady_samples_per_second for run in results)
        summary["loaders"][name] = {
            "samples_per_second": round(rate, 1),
            "mb_per_second": round(rate * mean_bytes / 1e6, 2),
            "first_batch_seconds": round(statistics.median(r.first_batch_seconds for r in results), 3),
            "main_peak_mb": round(max(r.main_peak_mb for r in results), 1),
            "worker_peak_mb": round(max(r.worker_peak_mb for r in results), 1),
            "runs": [asdict(run) for run in results],
        }
    summary.update(compare(summary["loaders"]))
    return summary


def _offset(progress: Callable[[int, int], None], before: int, total: int) -> Callable[[int], None]:
    """A run's count of samples as ``progress`` of the whole benchmark."""
    return lambda samples: progress(before + samples, total)


@dataclass(frozen=True)
class _Samples:
    """A run's message to the parent before its outcome: the samples it has read so far."""

    count: int


def _run_in_child(loader: str, spec: StoreSpec, settings: BenchSettings,
                  told: Callable[[int], None] | None) -> LoaderRun:
    """One run in a fresh process; ``told(samples)`` hears its counts as it goes."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    stop = context.Event()
    start_method = multiprocessing.get_start_method(allow_none=True)
    process = context.Process(target=_child, args=(loader, spec, settings, sender, stop, told is not None,
                                                   start_method), daemon=False)
    with _interrupts_ignored():  # inherited by the run and its loader's workers
        process.start()
    sender.close()
    try:
        result = _outcome(receiver, told)
    except EOFError:
        result = None
    except BaseException:  # Ctrl-C: a run half done measures nothing
        with _interrupts_ignored():
            _stop_run(process, stop)
        raise
    finally:
        receiver.close()
    process.join()
    if not isinstance(result, LoaderRun):
        raise RuntimeError(f"the {loader} benchmark run failed (exit code {process.exitcode}): {result}")
    return result


def _outcome(receiver: Any, told: Callable[[int], None] | None) -> object:
    """The run's outcome (a :class:`LoaderRun`, or its error in words), passing its counts on."""
    while True:
        message = receiver.recv()
        if not isinstance(message, _Samples):
            return message
        if told is not None:
            told(message.count)


def _stop_run(process: Any, stop: Any) -> None:
    """Ask the run to stop at its next batch, shutting its loader down as a training loop that
    breaks out of an epoch does (killing it mid-batch makes its workers print tracebacks and
    leaks their semaphores); terminate it only if it does not stop within :data:`_STOP_GRACE`."""
    stop.set()
    process.join(_STOP_GRACE)
    if process.is_alive():
        process.terminate()
        process.join()


@contextlib.contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """Ignore SIGINT while a run process starts, so that the run (and every process it starts)
    begins with SIGINT ignored: a Ctrl-C at the terminal reaches the whole process group, and
    only this process, which stops the run, should answer it. Python keeps a SIGINT it finds
    ignored at start-up ignored. (A Ctrl-C within the few milliseconds of a start is lost.)"""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _child(loader: str, spec: StoreSpec, settings: BenchSettings, sender: Any, stop: Any,
           tell_counts: bool, start_method: str | None) -> None:
    """One run. A spawned process's default start method is ``spawn``; the caller's is restored,
    so that both loaders start their workers as they would in the caller's training script."""
    multiprocessing.set_start_method(start_method, force=True)
    try:
        outcome: LoaderRun | str | None = _measure(loader, spec, settings, stop,
                                                   _Teller(sender if tell_counts else None))
    except Exception as exc:  # reported to the parent, which raises
        outcome = f"{type(exc).__name__}: {exc}"
    if outcome is None:
        return  # stopped: the parent no longer waits for a result
    try:
        sender.send(outcome)
    except OSError:
        pass  # the parent is gone (killed): nobody is waiting for this run
    finally:
        sender.close()


PIPELINES = ("train", "val")


def pipeline_steps(pipeline: str, ops: Any) -> list[Any]:
    """The photo pipeline's operations, from torchvision's ``v2`` or from :mod:`datakit.vision`."""
    if pipeline == "train":
        return [ops.RandomResizedCrop(224), ops.RandomHorizontalFlip()]
    return [ops.Resize(256), ops.CenterCrop(224)]


def counted_epochs(epochs: int) -> str:
    """Which epochs samples/s counts, in words (the first only when it is the only one)."""
    if epochs == 1:
        return "the only epoch, worker start-up and the first batch included"
    return f"epochs 2 to {epochs} (after the first)"


def baseline_transform(pipeline: str) -> tuple[Any, str]:
    """The transform torch's loader runs for ``pipeline``, and what it is, in words.

    torchvision's ``v2`` on PIL images when it imports; else datakit.vision's
    operations called one by one on uint8 tensors (torchvision's arithmetic,
    unfused).
    """
    if torchvision_problem() is not None:
        from datakit import vision

        return vision.Compose(pipeline_steps(pipeline, vision)).__call__, "datakit.vision unfused, on tensors"
    from torchvision.transforms import v2

    return v2.Compose([*pipeline_steps(pipeline, v2), v2.PILToTensor()]), "torchvision transforms.v2 on PIL"


def _baseline_fields(pipeline: str) -> dict[str, Any]:
    """What torch's loader ran, for the result: the help promises torchvision, so say when it was not."""
    problem = torchvision_problem()
    note = None if problem is None else (
        "torch's loader ran datakit.vision's operations unfused on tensors, in place of torchvision's "
        f"transforms.v2 on PIL images: {problem}")
    return {"baseline": baseline_transform(pipeline)[1], "baseline_is_torchvision": problem is None,
            "baseline_note": note}


def _dataset(loader_name: str, spec: StoreSpec, settings: BenchSettings) -> Any:
    import datakit

    if settings.pipeline is None:
        return datakit.StoreDataset(spec, output=settings.output)  # type: ignore[arg-type]
    if loader_name == CEILING:  # decoded whole, nothing else (the pixels stay in the workers)
        return datakit.StoreDataset(spec, output="numpy")
    if loader_name == "torch-tensor":
        from torchvision.transforms import v2

        transform = tensor_backend_transform(pipeline_steps(settings.pipeline, v2))
        return datakit.StoreDataset(spec, output="pil", transform=transform)
    if loader_name == "torch":
        transform, _ = baseline_transform(settings.pipeline)
        return datakit.StoreDataset(spec, output="pil", transform=transform)
    from datakit import vision

    return datakit.StoreDataset(spec, transform=vision.Compose(pipeline_steps(settings.pipeline, vision)))


class _Teller:
    """Sends the parent a run's count of samples, at most every :data:`_TELL_SECONDS` (a pipe write
    per batch would weigh on the figures of small batches); silent when not asked to tell, and once
    the parent is gone."""

    def __init__(self, sender: Any) -> None:
        self.sender = sender
        self.told = -float("inf")

    def __call__(self, samples: int) -> None:
        now = time.perf_counter()
        if self.sender is None or now - self.told < _TELL_SECONDS:
            return
        self.told = now
        try:
            self.sender.send(_Samples(samples))
        except OSError:
            self.sender = None


def _measure(loader_name: str, spec: StoreSpec, settings: BenchSettings, stop: Any,
             tell: _Teller) -> LoaderRun | None:
    """One run of one loader; ``None`` when ``stop`` was set (checked between batches)."""
    import torch

    import datakit

    dataset = _dataset(loader_name, spec, settings)
    loader_class: Any = datakit.DataLoader if loader_name == "datakit" else torch.utils.data.DataLoader
    options: dict[str, Any] = {"collate_fn": drop_pixels} if loader_name == CEILING else {}
    loader = loader_class(dataset, batch_size=settings.batch_size, shuffle=settings.shuffle,
                          num_workers=settings.workers, persistent_workers=settings.workers > 0,
                          generator=torch.Generator().manual_seed(0), **options)
    counts = _EpochCounts()
    started = time.perf_counter()
    for epoch in range(settings.epochs):
        if not _one_epoch(loader, epoch, settings.epochs, counts, stop, tell):
            del loader  # shuts its workers down, as a training loop that breaks out of an epoch does
            return None
    seconds = time.perf_counter() - started
    del loader  # stops persistent workers, so their peak memory is counted below
    kib = 1024 / 1e6
    steady = counts.steady_samples / counts.steady_seconds if counts.steady_seconds else 0.0
    return LoaderRun(
        loader=loader_name,
        samples=counts.samples,
        seconds=seconds,
        steady_samples_per_second=steady,
        first_batch_seconds=counts.first_batch,
        main_peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * kib,
        worker_peak_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * kib,
        worker_start_method=multiprocessing.get_start_method(),
    )


@dataclass
class _EpochCounts:
    samples: int = 0
    steady_samples: int = 0
    first_batch: float = 0.0
    steady_seconds: float = 0.0


def _one_epoch(loader: Any, epoch: int, epochs: int, counts: _EpochCounts, stop: Any,
               tell: _Teller) -> bool:
    """Read one epoch into ``counts``; ``False`` when ``stop`` is set before it ends."""
    epoch_started = time.perf_counter()
    epoch_samples = 0
    for batch_number, (_, labels) in enumerate(loader):
        if stop.is_set():
            return False
        if epoch == 0 and batch_number == 0:
            counts.first_batch = time.perf_counter() - epoch_started
        epoch_samples += len(labels)
        tell(counts.samples + epoch_samples)
    counts.samples += epoch_samples
    if epoch > 0 or epochs == 1:
        counts.steady_samples += epoch_samples
        counts.steady_seconds += time.perf_counter() - epoch_started
    return True

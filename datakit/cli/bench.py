"""``datakit bench STORE``: torch's DataLoader and datakit's, side by side, on your data."""

from __future__ import annotations

from typing import Any

import click

from datakit.cli._errors import DatakitCommand
from datakit.cli._options import output_options, store_options
from datakit.cli._output import Output

__all__ = ["bench_command"]


@click.command("bench", cls=DatakitCommand)
@click.argument("store")
@store_options
@click.option("--batch-size", "-b", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--workers", "-j", type=click.IntRange(min=0), default=2, show_default=True,
              help="Worker processes of each loader.")
@click.option("--epochs", "-e", type=click.IntRange(min=1), default=2, show_default=True,
              help="Epochs per run; samples/s counts the epochs after the first (with -e 1, that one "
                   "epoch, worker start-up included, as the result says).")
@click.option("--repeats", "-r", type=click.IntRange(min=1), default=3, show_default=True,
              help="Alternating runs of each loader; medians are reported.")
@click.option("--output", "output_kind", type=click.Choice(["tensor", "numpy", "bytes", "pil"]),
              default="tensor", show_default=True, help="What the dataset yields per sample (no pipeline).")
@click.option("--pipeline", type=click.Choice(["train", "val"]), default=None,
              help="A photo pipeline: train = RandomResizedCrop(224) + flip, val = Resize(256) + "
                   "CenterCrop(224); torchvision's on torch's loader with each backend of its reference "
                   "(PIL images; uint8 tensors: torch-tensor) (datakit.vision's unfused where torchvision "
                   "does not import, as the result says) against datakit.vision's fused on datakit's, "
                   "beside the decode ceiling (the images decoded whole, nothing else, by as many "
                   "workers). Default: train when the store's images differ in size, else none.")
@output_options
def bench_command(store: str, backend_options: dict[str, str], batch_size: int, workers: int,
                  epochs: int, repeats: int, output_kind: str, pipeline: str | None, as_json: bool,
                  quiet: bool) -> None:
    """Read STORE with torch's DataLoader and datakit's, alternating, and compare.

    Each run is a fresh process; reported are samples/s and MB/s after the
    first epoch (with -e 1, over that epoch, start-up included: the result
    says which), time to the first batch, and peak memory of the main process
    and of the largest worker. With --pipeline, each ratio names the
    torchvision backend it is against, the headline is the faster one, and
    each loader's samples/s is a share of the decode ceiling. Ctrl-C stops
    the runs and prints one line.
    """
    from datakit.stores import resolve_store
    from datakit.tools.benchmark import BenchSettings, run_benchmark

    output = Output(json=as_json, quiet=quiet)
    if pipeline is None and output_kind in ("tensor", "numpy"):
        with resolve_store(store, backend_options).open_reader() as reader:
            stats = reader.manifest.stats
        if len(set(stats.width_range)) > 1 or len(set(stats.height_range)) > 1:
            pipeline = "train"  # images of several sizes do not batch as they are
            output.note("the store's images differ in size, so they cannot be batched as they are: "
                        "benchmarking the train pipeline (--pipeline train; --pipeline val or "
                        "--output bytes for others)")
    if output_kind == "pil" and pipeline is None:
        raise click.UsageError("--output pil cannot be batched by the default collate; "
                               "use tensor, numpy or bytes, or a --pipeline")
    settings = BenchSettings(store, backend_options, batch_size=batch_size, workers=workers, epochs=epochs,
                             output=output_kind, pipeline=pipeline)
    output.note(f"benchmarking {store}: {repeats} alternating runs of {epochs} epoch(s) per loader...")
    with output.progress("benchmarking", unit="samples") as progress:
        summary = run_benchmark(settings, repeats, progress)
    output.result(summary, _render)


def _render(summary: dict[str, Any]) -> str:
    settings = summary["settings"]
    produces = f"output={settings['output']}"
    if settings.get("pipeline"):
        produces = (f"pipeline={settings['pipeline']} "
                    f"(torch: {summary['baseline']}; datakit: datakit.vision fused)")
    ceiling = "decode_ceiling" in summary
    lines = [
        f"store {summary['store']}: {summary['records']} records, batch {settings['batch_size']}, "
        f"{settings['workers']} workers, {produces}, median of {summary['repeats']} runs",
        f"{'loader':<15}{'samples/s':>12}{'MB/s':>10}{'1st batch s':>13}{'main MB':>10}{'worker MB':>11}"
        + (f"{'of ceiling':>12}" if ceiling else ""),
    ]
    for name, result in summary["loaders"].items():
        share = result.get("share_of_ceiling")
        lines.append(f"{name:<15}{result['samples_per_second']:>12.0f}{result['mb_per_second']:>10.1f}"
                     f"{result['first_batch_seconds']:>13.3f}{result['main_peak_mb']:>10.0f}"
                     f"{result['worker_peak_mb']:>11.0f}" + (f"{share:>12.0%}" if share is not None else ""))
    lines += _ratio_lines(summary)
    lines.append(f"samples/s and MB/s over {summary['samples_per_second_counts']}")
    if summary.get("baseline_note"):
        lines.append(f"note: {summary['baseline_note']}")
    return "\n".join(lines)


def _ratio_lines(summary: dict[str, Any]) -> list[str]:
    """datakit against each torch loader, naming the torchvision backend it ran; the headline; the ceiling."""
    from datakit.tools.bench_contenders import BACKENDS, CEILING

    ratios = summary.get("ratios", {"torch": summary["ratio"]})
    torchvision = summary.get("baseline_is_torchvision", False)
    lines = [f"datakit / {name}: {ratio}x" + (f" ({BACKENDS[name]})" if torchvision else "")
             for name, ratio in ratios.items()]
    if len(ratios) > 1:
        against = summary["ratio_against"]
        lines.append(f"headline: datakit / the faster torchvision backend here ({BACKENDS[against]}): "
                     f"{summary['ratio']}x")
    if "decode_ceiling" in summary:
        lines.append(f"{CEILING}: {summary['decode_ceiling']:.0f} samples/s, the images decoded whole "
                     "(simplejpeg, libjpeg-turbo) by as many workers, nothing else")
    return lines

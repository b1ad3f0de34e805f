"""How ``datakit inspect`` words each field's figures: one line per field, categories beneath boxes.

The figures are :func:`datakit.inspect`'s ``fields`` entry
(:mod:`datakit.tools.inspect.field_stats`); ``--json`` prints them whole,
and here they become a few words a person reads at a glance. A boxes
field's categories are listed most frequent first, the first
:data:`SHOWN_CATEGORIES` of them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["field_lines", "SHOWN_CATEGORIES"]

SHOWN_CATEGORIES = 12
"""Categories named under a boxes field; ``--json`` lists every one."""


def field_lines(fields: dict[str, dict[str, Any]]) -> list[str]:
    """The ``fields`` block of the text output (nothing for a store of an image and a label)."""
    if not fields:
        return []
    width = max(len(name) for name in fields)
    lines = ["fields"]
    for name, figures in fields.items():
        words = _words(figures)
        if figures["null"]:
            words.append(f"{figures['null']} sample(s) without a value")
        lines.append(f"  {name:<{width}}  {figures['type']}" + (f": {'; '.join(words)}" if words else ""))
        if figures["type"] == "boxes" and figures["categories"]:
            lines.append(f"  {'':<{width}}  categories: {_categories(figures['categories'])}")
    return lines


def _words(figures: dict[str, Any]) -> list[str]:
    kind = figures["type"]
    if kind == "boxes":
        return _boxes(figures)
    if kind == "str" and figures["length"] is not None:
        length = figures["length"]
        bound = "" if length["max"] <= figures["lengths_exact_to"] else " (lengths past " \
            f"{figures['lengths_exact_to']} counted by powers of two)"
        return [f"{length['min']}..{length['max']} characters, median {length['median']}, 5% {length['p5']}, "
                f"95% {length['p95']}, mean {length['mean']}{bound}"]
    if kind in ("int", "float") and figures["min"] is not None:
        return [f"{figures['min']}..{figures['max']}"]
    if kind == "masks" and "instances" in figures:
        coverage = figures["mean_coverage"]
        covering = f", covering {100 * coverage:.1f}% of an image on average" if coverage is not None else ""
        return [f"{figures['instances']} instance(s){covering}"]
    if kind == "keypoints":
        per = f" (of {figures['points']} per instance)" if figures["points"] is not None else ""
        return [f"{figures['instances']} instance(s), {figures['visible']} point(s) labelled{per}"]
    return []


def _boxes(figures: dict[str, Any]) -> list[str]:
    per_image = figures["per_image"]
    if per_image is None:
        return ["no boxes"]
    sizes = figures["sizes"]
    words = [f"{figures['boxes']} in {figures['values']} image(s), per image "
             f"{per_image['min']}..{per_image['max']} (median {per_image['median']}; "
             f"{figures['images_without']} image(s) without any)",
             f"small {sizes['small']}, medium {sizes['medium']}, large {sizes['large']} (COCO's areas)"]
    notes = [f"{figures[key]} {words}" for key, words in (
        ("crowd", "crowd"), ("outside", "outside their image"), ("degenerate", "of no size or with a NaN"),
        ("clipped", "clipped to their image (--boxes clip)"), ("dropped", "dropped (--boxes drop)"))
        if figures[key]]
    return words + notes


def _categories(categories: list[dict[str, Any]]) -> str:
    shown = [f"{category['name'] if category['name'] is not None else '?'} (id {category['id']}) "
             f"{category['boxes']}" for category in categories[:SHOWN_CATEGORIES]]
    more = len(categories) - SHOWN_CATEGORIES
    return ", ".join(shown) + (f", ... and {more} more (--json lists them)" if more > 0 else "")

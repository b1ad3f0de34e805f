"""What a class name given as data may be, and the order class names sort in.

Label files, WebDataset ``.cls``/``.json`` members and Hugging Face label
columns give labels as text: a class name, or an integer. Each such label is
bounded (:func:`label_problem`), so that a hostile or mistaken file is refused
naming its record, instead of failing later and far away:

- a class name has at most :data:`MAX_CLASS_NAME` (1024) characters: names
  are kept in every store's manifest and shown by ``datakit inspect``;
- an integer label (``-?[0-9]+``, which sorts as a number) lies within int64,
  ``-9223372036854775808`` to ``9223372036854775807``, what a label tensor
  holds (Python refuses to convert integers of over 4,300 digits at all);
- a name is Unicode text: a lone surrogate (a JSON escape such as ``"\\ud800"``)
  is no character and cannot be stored as UTF-8.

The classes of a source are its labels sorted (:func:`sorted_classes`): as
numbers when every one is an integer, else as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MAX_CLASS_NAME", "INT64_MIN", "INT64_MAX", "LongInteger", "json_integer", "is_integer",
           "label_problem", "lone_surrogate", "shown", "sorted_classes", "class_order"]

MAX_CLASS_NAME = 1024
"""The most characters a class name may have."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The range of an integer label."""

_INTEGER = re.compile(r"-?[0-9]+")
_INT64_DIGITS = 19
_JSON_DIGITS = 40
_SHOWN = 40


@dataclass(frozen=True)
class LongInteger:
    """A JSON integer of more digits than any label has, kept as its text (:func:`json_integer`)."""

    digits: str

    def __str__(self) -> str:
        return self.digits


def json_integer(text: str) -> int | LongInteger:
    """``json.loads``'s ``parse_int``: an integer, or a :class:`LongInteger` when it has over 40 digits.

    Python refuses to convert an integer of over 4,300 digits, with advice to
    raise its limit, which is no advice for a data file; and no label is that
    long. The caller refuses a :class:`LongInteger` where a label should be,
    naming its record, and ignores it anywhere else.
    """
    return int(text) if len(text) <= _JSON_DIGITS else LongInteger(text)


def is_integer(name: str) -> bool:
    """Whether ``name`` is an integer label within int64 (``"-3"``, ``"007"``); any length is safe."""
    if not _INTEGER.fullmatch(name):
        return False
    if len(name.lstrip("-").lstrip("0")) > _INT64_DIGITS:
        return False
    return INT64_MIN <= int(name) <= INT64_MAX


def label_problem(name: str) -> str | None:
    """Why ``name`` cannot be a class name, in words; ``None`` when it can.

    Example::

        >>> label_problem("cat") is None and label_problem("-12") is None
        True
        >>> label_problem("9" * 5000)[:61]
        "the integer label '99999999999999999999'... (5000 digits) is "
        >>> label_problem("c" * 1025)[-40:]
        'a class name has at most 1024 characters'
    """
    if _INTEGER.fullmatch(name) and not is_integer(name):
        digits = len(name.lstrip("-"))
        return (f"the integer label {shown(name)} ({digits} digits) is outside int64 ({INT64_MIN} to "
                f"{INT64_MAX}); write it as a class name that is not a bare integer")
    if len(name) > MAX_CLASS_NAME:
        return (f"the class name {shown(name)} has {len(name)} characters; a class name has at most "
                f"{MAX_CLASS_NAME} characters")
    surrogate = lone_surrogate(name)
    if surrogate:
        return (f"the class name {shown(name)} holds {surrogate}, a lone surrogate, which is no character; "
                "write the character itself")
    return None


def lone_surrogate(text: str) -> str:
    """The first lone surrogate of ``text`` as its escape (``"\\\\ud800"``), or ``""`` when it has none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"\\u{ord(text[exc.start]):04x}"
    return ""


def shown(text: str) -> str:
    """``text`` for a message: its ``repr``, cut after 20 characters when it is longer than 40."""
    if len(text) <= _SHOWN:
        return repr(text)
    return repr(text[:20]) + "..."


def sorted_classes(names: set[str] | list[str]) -> list[str]:
    """Class names sorted as numbers when every one is an integer (``"007"`` after ``"7"``),
    else as text.

    Example::

        >>> sorted_classes({"10", "2", "0", "9"})
        ['0', '2', '9', '10']
        >>> sorted_classes({"10", "2", "x"})
        ['10', '2', 'x']
    """
    names = list(names)
    if _integers(names):
        return sorted(names, key=lambda name: (int(name), name))
    return sorted(names)


def class_order(classes: list[str]) -> str:
    """``"numeric"`` when ``classes`` are integers sorted as numbers, else ``"text"``."""
    return "numeric" if _integers(classes) and classes == sorted_classes(classes) else "text"


def _integers(names: list[str]) -> bool:
    return bool(names) and all(is_integer(name) for name in names)

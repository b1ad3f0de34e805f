"""The exceptions datakit raises.

Every error that reaches a user names the thing at fault (a file, a store, a
key, an argument) and, where there is one, the command that fixes it. Library
code raises these; the CLI turns them into one-line messages in one place
(``datakit/cli/_errors.py``).

Advice is given in the reader's terms: ``overwrite=True`` to a caller of
:func:`datakit.convert`, ``--overwrite`` to a user of ``datakit convert``. An
error that advises an option is built with :meth:`DatakitError.advising`, from
one template and each option's two spellings (:func:`option`, :class:`Spelling`);
``str(error)`` is the Python wording and :attr:`DatakitError.command_line` the
command line's, which the CLI prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "Spelling",
    "option",
    "DatakitError",
    "SourceError",
    "LabelFileError",
    "FieldFileError",
    "ExportError",
    "DestinationExistsError",
    "ConversionError",
    "StoreError",
    "StoreNotFoundError",
    "InvalidLocationError",
    "IncompleteStoreError",
    "IncompatibleStoreError",
    "CorruptRecordError",
    "CorruptStoreError",
    "StoreReplacedError",
    "StoreUnavailableError",
    "StoreBusyError",
    "ErrorBudgetExhausted",
    "ReadOnlyAttributeError",
    "TransformError",
    "DatakitWarning",
]


@dataclass(frozen=True)
class Spelling:
    """Something an error advises, as the Python API and the command line spell it.

    Example: ``Spelling("labels=FILE", "--labels FILE")``; :func:`option` spells
    the usual cases.
    """

    python: str
    command_line: str


def option(name: str, value: object = True) -> Spelling:
    """An argument of :func:`datakit.convert` and the ``datakit convert`` option that sets it.

    Example::

        >>> option("overwrite")
        Spelling(python='overwrite=True', command_line='--overwrite')
        >>> option("max_side", 256).command_line
        '--max-side 256'
        >>> option("format", "raw").python
        "format='raw'"
    """
    flag = "--" + name.replace("_", "-")
    if value is True:
        return Spelling(f"{name}=True", flag)
    shown = value if isinstance(value, (int, float)) else str(value)
    return Spelling(f"{name}={value!r}", f"{flag} {shown}")


_Error = TypeVar("_Error", bound="DatakitError")


class DatakitError(Exception):
    """Base class of every error datakit raises on purpose.

    Attributes:
        command_line: the message as the command line words it, when it
            advises options (``--overwrite`` where ``str(error)`` says
            ``overwrite=True``); ``None`` when both read the same.
    """

    command_line: str | None = None

    @classmethod
    def advising(cls: type[_Error], template: str, **parts: object) -> _Error:
        """The error whose message is ``template`` filled in with ``parts``.

        Each :class:`Spelling` among ``parts`` reads as its ``python`` form in
        ``str(error)`` and as its ``command_line`` form in :attr:`command_line`;
        other parts read the same in both. For the subclasses whose only
        argument is the message.

        Example::

            >>> error = DestinationExistsError.advising("{where} exists; pass {overwrite}",
            ...                                         where="s.lmdb", overwrite=option("overwrite"))
            >>> str(error), error.command_line
            ('s.lmdb exists; pass overwrite=True', 's.lmdb exists; pass --overwrite')
        """
        def spelled(command_line: bool) -> str:
            return template.format(**{
                name: (part.command_line if command_line else part.python) if isinstance(part, Spelling)
                else part for name, part in parts.items()})

        error = cls(spelled(False))
        error.command_line = spelled(True)
        return error


class SourceError(DatakitError):
    """The image folder to convert is missing, unreadable or holds no images."""


class LabelFileError(SourceError):
    """A label file (``datakit convert --labels``) is malformed; the message names its line."""


class FieldFileError(LabelFileError):
    """A field file (``datakit convert --fields``) is malformed; the message names its line and column."""


class ExportError(DatakitError):
    """An export cannot start (its folder is not empty) or would lose or misplace a sample."""


class DestinationExistsError(DatakitError):
    """A conversion would overwrite an existing store or path."""


class ConversionError(DatakitError):
    """A conversion could not finish, or finished with skipped files under ``strict``."""


class StoreError(DatakitError):
    """A store cannot be read as a datakit store."""


class StoreNotFoundError(StoreError):
    """No store exists at the given location."""


class InvalidLocationError(StoreError):
    """A location no store can be at: a URI of a scheme datakit does not support, a
    MongoDB URI where a path is needed (or the reverse), or a conversion's
    destination inside the folder it converts. The command line reports it as a
    usage error (exit code 2)."""


class IncompleteStoreError(StoreError):
    """The store has no manifest: its conversion was interrupted.

    Rerunning ``datakit convert SRC DEST --resume`` completes it.
    """


class IncompatibleStoreError(StoreError):
    """The store was written in a format version this datakit cannot read."""


class CorruptRecordError(StoreError):
    """A record failed its checksum or could not be parsed.

    Attributes:
        key: the record's key in the store.
        reason: what was wrong with it.
    """

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"record {key!r} is corrupt: {reason}")
        self.key = key
        self.reason = reason

    def __reduce__(self) -> tuple[type[CorruptRecordError], tuple[str, str]]:
        # Keeps the (key, reason) signature when the error crosses a process boundary.
        return (type(self), (self.key, self.reason))


class CorruptStoreError(StoreError):
    """The store's files are damaged below the records: the storage engine cannot read
    them (a B-tree page of an LMDB ``data.mdb`` is missing or garbled). Unlike a
    :class:`CorruptRecordError`, ``on_error="skip"`` does not skip it: no record
    checksum can say how much of the store is lost. The message names the store and,
    where a read asked for one, the key."""


class StoreReplacedError(StoreError):
    """The store a dataset or reader was opened on was replaced since (``datakit convert
    --overwrite``): its records and its manifest are no longer the ones it holds, so
    none is read under the old manifest; create the dataset again."""


class ErrorBudgetExhausted(StoreError):
    """A dataset with ``on_error="skip"`` met more corrupt records than ``max_errors``."""


class StoreUnavailableError(StoreError):
    """The store's server could not be reached, or refused the credentials."""


class DatakitWarning(UserWarning):
    """Something the user should hear about that does not stop the work (the command line
    prints it as a ``warning:`` line, and not under ``--quiet``)."""


class StoreBusyError(StoreError):
    """Another conversion is writing the store now; a second writer would corrupt it."""


class ReadOnlyAttributeError(DatakitError, AttributeError):
    """An attribute that datakit reads from the store (``dataset.samples``) was assigned.

    An ``AttributeError`` too, as Python's own read-only attributes raise, so
    that code that tries and falls back keeps working; the message names the
    attribute and says why it cannot be set.
    """


class TransformError(DatakitError, ValueError):
    """A ``datakit.vision`` operation cannot apply to a sample as it is (a ``RandomCrop`` larger than
    the image, without padding), or cannot move the sample's boxes, masks or keypoints; the message
    names the operation, the sample's record where a dataset read it, and what to change. A
    ``ValueError`` too, as torchvision raises for the same sample."""

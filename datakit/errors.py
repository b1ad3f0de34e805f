"""The exceptions datakit raises.

Every error that reaches a user names the thing at fault (a file, a store, a
key, an argument) and, where there is one, the command that fixes it. Library
code raises these; the CLI turns them into one-line messages in one place
(``datakit/cli/_errors.py``).
"""

from __future__ import annotations

__all__ = [
    "DatakitError",
    "SourceError",
    "LabelFileError",
    "ExportError",
    "DestinationExistsError",
    "ConversionError",
    "StoreError",
    "StoreNotFoundError",
    "InvalidLocationError",
    "IncompleteStoreError",
    "IncompatibleStoreError",
    "CorruptRecordError",
    "StoreUnavailableError",
    "StoreBusyError",
    "ErrorBudgetExhausted",
    "DatakitWarning",
]


class DatakitError(Exception):
    """Base class of every error datakit raises on purpose."""


class SourceError(DatakitError):
    """The image folder to convert is missing, unreadable or holds no images."""


class LabelFileError(SourceError):
    """A label file (``datakit convert --labels``) is malformed; the message names its line."""


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


class ErrorBudgetExhausted(StoreError):
    """A dataset with ``on_error="skip"`` met more corrupt records than ``max_errors``."""


class StoreUnavailableError(StoreError):
    """The store's server could not be reached, or refused the credentials."""


class DatakitWarning(UserWarning):
    """Something the user should hear about that does not stop the work (the command line
    prints it as a ``warning:`` line, and not under ``--quiet``)."""


class StoreBusyError(StoreError):
    """Another conversion is writing the store now; a second writer would corrupt it."""

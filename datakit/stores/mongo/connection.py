"""Talking to a MongoDB server: URIs, lazy per-process clients, retries, errors.

Everything here is shared by the MongoDB reader and writer
(:mod:`datakit.stores.mongo.reader`, :mod:`datakit.stores.mongo.writer`):

* URI helpers: the database a URI names, its options, and a display form
  with the password masked (a password never reaches a message or a log).
* :class:`MongoConnection`: opens a ``MongoClient`` on first use *in the
  calling process*, and opens a new one when it finds itself in another
  process (a client must never be used across ``fork``). The inherited client
  is dropped without being used or closed; pymongo's own after-fork hook has
  already disarmed it in the child.
* :meth:`MongoConnection.call`: runs one operation, retrying transient
  network errors (``AutoReconnect``, ``NetworkTimeout``) with bounded
  exponential backoff, and turns every pymongo error into a typed
  :class:`~datakit.errors.StoreError` naming the server and the keys.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

from datakit.errors import StoreError, StoreUnavailableError

__all__ = [
    "DEFAULT_SERVER_SELECTION_TIMEOUT_MS",
    "RetryPolicy",
    "MongoConnection",
    "split_uri",
    "mask_uri",
    "uri_database",
    "uri_options",
    "describe_keys",
]

DEFAULT_SERVER_SELECTION_TIMEOUT_MS = 10_000
"""How long to wait for a server unless the URI sets ``serverSelectionTimeoutMS``."""

_AUTH_FAILED = 18
_UNAUTHORIZED = 13

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff for transient network errors.

    Attributes:
        attempts: tries in all, the first one included.
        initial_delay: seconds before the first retry; doubled for each next one.
        max_delay: the longest wait between two tries.
    """

    attempts: int = 5
    initial_delay: float = 0.1
    max_delay: float = 2.0

    def delays(self) -> list[float]:
        """The waits between consecutive tries."""
        return [min(self.initial_delay * 2**n, self.max_delay) for n in range(self.attempts - 1)]


DEFAULT_RETRY = RetryPolicy()
_sleep = time.sleep  # replaced in tests


def split_uri(uri: str) -> tuple[str, str, str, str]:
    """``(scheme://, userinfo, hosts, rest)`` where rest is ``/db?options`` (possibly empty)."""
    scheme, sep, remainder = uri.partition("://")
    if not sep:
        return "", "", uri, ""

    def end(character: str) -> int:
        position = remainder.find(character)
        return len(remainder) if position < 0 else position

    # pymongo ends the user info at the last "@" before the first "/"; a
    # malformed password may hold a "/" or a "?" itself, so take whichever
    # reading masks more: a password must never show.
    at = max(remainder.rfind("@", 0, end("/")), remainder.rfind("@", 0, end("?")))
    userinfo = remainder[:at] if at >= 0 else ""
    after_user = remainder[at + 1:] if at >= 0 else remainder
    slash, question = after_user.find("/"), after_user.find("?")
    cut = min(index for index in (slash, question, len(after_user)) if index >= 0)
    return scheme + "://", userinfo, after_user[:cut], after_user[cut:]


def mask_uri(uri: str) -> str:
    """``uri`` with any password replaced by ``***``."""
    scheme, userinfo, hosts, rest = split_uri(uri)
    if not userinfo:
        return uri
    user, has_password, _ = userinfo.partition(":")
    return f"{scheme}{user}{':***' if has_password else ''}@{hosts}{rest}"


def _password(uri: str) -> str:
    _, userinfo, _, _ = split_uri(uri)
    _, has_password, password = userinfo.partition(":")
    return password if has_password else ""


def uri_database(uri: str) -> str | None:
    """The database named in the URI's path, if any."""
    _, _, _, rest = split_uri(uri)
    path = rest.partition("?")[0].lstrip("/")
    return unquote(path) or None


def uri_options(uri: str) -> dict[str, str]:
    """The URI's query options, with lower-cased names."""
    _, _, _, rest = split_uri(uri)
    query = rest.partition("?")[2]
    options = {}
    for item in query.replace(";", "&").split("&"):
        name, _, value = item.partition("=")
        if name:
            options[name.lower()] = unquote(value)
    return options


def describe_keys(keys: Sequence[str]) -> str:
    """A short list of record keys for a message."""
    shown = ", ".join(repr(key) for key in keys[:5])
    return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


class MongoConnection:
    """One process's client to one store's database, opened on first use.

    Args:
        uri: the server's URI, as the user gave it.
        database: the database holding the store.
        where: how messages name the store (password masked).
        retry: backoff for transient network errors.
    """

    def __init__(self, uri: str, database: str, where: str, retry: RetryPolicy = DEFAULT_RETRY) -> None:
        self.uri = uri
        self.database_name = database
        self.where = where
        self.retry = retry
        self._client: Any = None
        self._pid: int | None = None
        self._finalizer: Callable[[], Any] | None = None

    @property
    def client(self) -> Any:
        """This process's ``MongoClient`` (created here on first use)."""
        if self._client is None or self._pid != os.getpid():
            # A client inherited through fork belongs to the parent: never use it.
            self._client = self._open_client()
            self._pid = os.getpid()
            # A reader nobody closed (a dataset going out of scope) still closes its client.
            self._finalizer = weakref.finalize(self, _close_if_owner, self._client, self._pid)
        return self._client

    def database(self, write_concern: Any = None) -> Any:
        return self.client.get_database(self.database_name, write_concern=write_concern)

    def _open_client(self) -> Any:
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        options = uri_options(self.uri)
        extra: dict[str, Any] = {}
        if "serverselectiontimeoutms" not in options:
            extra["serverSelectionTimeoutMS"] = DEFAULT_SERVER_SELECTION_TIMEOUT_MS
        if "appname" not in options:
            extra["appname"] = "datakit"
        try:
            return MongoClient(self.uri, connect=False, **extra)
        except PyMongoError as exc:
            raise self.translate(exc) from None

    def call(self, operation: Callable[[], T], keys: Sequence[str] = ()) -> T:
        """Run ``operation``, retrying transient network errors.

        Raises:
            StoreUnavailableError: the server cannot be reached, the network
                kept failing, or the credentials were refused.
            StoreError: any other MongoDB error.
        """
        from pymongo.errors import AutoReconnect, PyMongoError, ServerSelectionTimeoutError

        delays = self.retry.delays()
        for attempt in range(len(delays) + 1):
            try:
                return operation()
            except ServerSelectionTimeoutError as exc:
                # Already waited the whole server selection timeout: don't multiply it.
                raise self.translate(exc, keys) from None
            except AutoReconnect as exc:
                if attempt == len(delays):
                    raise self.translate(exc, keys, attempts=attempt + 1) from None
                _sleep(delays[attempt])
            except PyMongoError as exc:
                raise self.translate(exc, keys) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def translate(self, exc: BaseException, keys: Sequence[str] = (), attempts: int = 1) -> StoreError:
        """A one-line datakit error for a pymongo error."""
        from pymongo.errors import (
            AutoReconnect,
            ConfigurationError,
            OperationFailure,
            ServerSelectionTimeoutError,
        )

        reason = self._scrub(str(exc))
        about = f" (records {describe_keys(list(keys))})" if keys else ""
        if isinstance(exc, ServerSelectionTimeoutError):
            reason = reason.split(", Timeout:")[0].split(" (configured timeouts")[0]
            return StoreUnavailableError(
                f"cannot reach the MongoDB server for {self.where}{about} ({reason}); "
                "check that it runs and that the URI is right (the wait is set by "
                "serverSelectionTimeoutMS in the URI)"
            )
        if isinstance(exc, AutoReconnect):
            return StoreUnavailableError(
                f"lost the connection to the MongoDB server for {self.where}{about} "
                f"after {attempts} attempt(s) ({reason})"
            )
        if isinstance(exc, OperationFailure):
            if exc.code == _AUTH_FAILED or "Authentication failed" in reason:
                return StoreUnavailableError(
                    f"the MongoDB server for {self.where} refused the credentials (authentication "
                    "failed); check the user name, password and authSource in the URI"
                )
            if exc.code == _UNAUTHORIZED:
                return StoreUnavailableError(
                    f"the MongoDB user of {self.where} is not authorized{about} ({reason})")
        if isinstance(exc, ConfigurationError):
            return StoreError(f"{self.where}: invalid MongoDB URI or option ({reason})")
        return StoreError(f"{self.where}: MongoDB error{about} ({reason})")

    def _scrub(self, text: str) -> str:
        text = " ".join(text.split())
        password = _password(self.uri)
        if password:
            for form in {password, unquote(password)}:
                text = text.replace(form, "***")
        return text

    def close(self) -> None:
        """Close this process's client; one inherited through fork is left alone."""
        if self._finalizer is not None and self._pid == os.getpid():
            self._finalizer()  # closes the client, once
        self._client = None
        self._pid = None
        self._finalizer = None


def _close_if_owner(client: Any, pid: int) -> None:
    """Close ``client`` in the process that opened it, never in a forked child."""
    if os.getpid() == pid:
        client.close()

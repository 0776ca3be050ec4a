"""Exceptions: every native status maps to a GeistError subclass carrying the native message."""

from __future__ import annotations


class GeistError(Exception):
    """Base of every error geist raises. `.status` is the native geist_status (0 if none)."""

    status: int = 0

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgumentError(GeistError, ValueError):
    status = 1


class OutOfMemoryError(GeistError, MemoryError):
    status = 2


class GeistIOError(GeistError, OSError):
    status = 3


class BadFormatError(GeistError):
    status = 4


class UnsupportedError(GeistError):
    status = 5


class CapacityError(GeistError):
    """A prompt or step would pass the session's max_seq_len; the session is unchanged."""

    status = 6


class StateError(GeistError):
    status = 7


class BufferTooSmallError(GeistError):
    status = 8


class InternalError(GeistError):
    status = 9


_BY_STATUS: dict[int, type[GeistError]] = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        OutOfMemoryError,
        GeistIOError,
        BadFormatError,
        UnsupportedError,
        CapacityError,
        StateError,
        BufferTooSmallError,
        InternalError,
    )
}


def error_for_status(status: int, message: str) -> GeistError:
    cls = _BY_STATUS.get(status, GeistError)
    return cls(message or f"geist error {status}", status)

"""geist: small language models inside games. Python SDK over the native core (geist.h)."""

from geist.actions import Action, ActionCall
from geist.errors import (
    BadFormatError,
    BufferTooSmallError,
    CapacityError,
    GeistError,
    GeistIOError,
    InternalError,
    InvalidArgumentError,
    OutOfMemoryError,
    StateError,
    UnsupportedError,
)
from geist.model import KV_MODES, Engine, Model, Session, backends_available, default_engine

__version__ = "0.1.0"

__all__ = [
    "KV_MODES",
    "Action",
    "ActionCall",
    "BadFormatError",
    "BufferTooSmallError",
    "CapacityError",
    "Engine",
    "GeistError",
    "GeistIOError",
    "InternalError",
    "InvalidArgumentError",
    "Model",
    "OutOfMemoryError",
    "Session",
    "StateError",
    "UnsupportedError",
    "backends_available",
    "default_engine",
]

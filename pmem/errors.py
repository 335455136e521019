"""Exceptions raised by the pmem library.

The CLI and TUI translate these into one-line messages; anything else is a bug.
"""


class PmemError(Exception):
    """Base class for every error pmem expects and can explain."""

    exit_code = 1


class UsageError(PmemError):
    """Bad input from the user: a malformed date, duration, option value or file."""

    exit_code = 2


class NotFound(PmemError):
    """No memory (or operation, or model) matches what was asked for."""


class AmbiguousId(PmemError):
    """An id prefix matches more than one memory."""


class DatabaseError(PmemError):
    """The database cannot be opened, is locked, corrupt, or from a newer pmem."""


class ExtensionError(DatabaseError):
    """No SQLite driver on this Python can load sqlite-vec."""


class ModelError(PmemError):
    """A model is missing, corrupt, cannot be provisioned, or does not fit the database."""


class ModelMismatch(ModelError):
    """The stored vectors come from a different embedding model or dimension."""


class ExtractionError(PmemError):
    """The chat model could not produce usable output."""

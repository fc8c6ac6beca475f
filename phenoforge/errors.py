"""Errors a user can cause, each with a message that says what to do next."""

from __future__ import annotations


class PhenoforgeError(Exception):
    """Base class: the CLI and dashboard show ``str(error)`` instead of a traceback."""


class VocabularyError(PhenoforgeError):
    """The vocabulary database is missing, corrupt or of the wrong schema."""


class LibraryError(PhenoforgeError):
    """A cohort library or cohort file is missing or malformed (the message names the file)."""


class IndexError_(PhenoforgeError):
    """A retrieval index is missing, stale or corrupt."""


class ImportRowError(PhenoforgeError):
    """A row of an imported file is bad; the message names the line and the problem."""


class CrosswalkError(PhenoforgeError):
    """The cohort crosswalk is malformed or names a cohort a library does not have (the message names the line)."""


class DataDirError(PhenoforgeError):
    """The data directory (``PHENOFORGE_DATA_DIR``) is a file or cannot be written."""


class DiskFullError(PhenoforgeError):
    """A write ran out of disk space; what was there before is kept."""


class SettingError(PhenoforgeError, ValueError):
    """An environment setting (``PHENOFORGE_...``) holds a value phenoforge does not know: said, not guessed."""

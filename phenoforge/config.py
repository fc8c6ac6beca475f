"""Where phenoforge keeps what it builds at run time.

Everything lives under one data directory (``PHENOFORGE_DATA_DIR``, default ``<repo>/data``) so a
test can point the whole project at a temporary folder with one environment variable.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from phenoforge.errors import DataDirError

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PLUGIN_TIMEOUT = 60.0
"""Seconds a plug-in method may take per cohort before the harness stops waiting for it (built-ins: no limit)."""

ProgressCallback = Callable[[int, int, str], None]
"""``progress(done, total, message)``: a bar in the CLI, ``st.progress`` in the dashboard."""


_WRITABLE: set[Path] = set()
"""Data directories already shown to be writable in this process (checked once each)."""


def data_dir() -> Path:
    """The data directory, created on demand; a file or an unwritable place is a one-line error."""
    path = Path(os.environ.get("PHENOFORGE_DATA_DIR", REPO_ROOT / "data")).expanduser().resolve()
    if path.is_file():
        raise DataDirError(f"the data directory {path} is a file, not a folder: {_POINT_ELSEWHERE}")
    try:
        path.mkdir(parents=True, exist_ok=True)
        if path not in _WRITABLE:
            with tempfile.TemporaryFile(dir=path):
                pass
            _WRITABLE.add(path)
    except OSError as error:
        raise DataDirError(
            f"the data directory {path} cannot be created or written ({error.strerror or error}): {_POINT_ELSEWHERE}"
        ) from None
    return path


_POINT_ELSEWHERE = "point PHENOFORGE_DATA_DIR at a folder you can write to (or unset it to use <repo>/data)"


def vocab_db_path() -> Path:
    return data_dir() / "vocab.duckdb"


def libraries_dir() -> Path:
    return data_dir() / "libraries"


def dense_index_dir() -> Path:
    return data_dir() / "dense"


def app_state_db_path() -> Path:
    return data_dir() / "app_state.sqlite"


def cache_dir() -> Path:
    return data_dir() / "cache"


def versions_dir() -> Path:
    """Signed-off code lists: one folder per list, one JSON file per version (``phenoforge.lists.store``)."""
    return data_dir() / "versions"


def no_progress(done: int, total: int, message: str) -> None:
    """Default progress callback: says nothing."""

"""Where phenoforge keeps what it builds at run time.

Everything lives under one data directory (``PHENOFORGE_DATA_DIR``, default ``<repo>/data``) so a
test can point the whole project at a temporary folder with one environment variable.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

ProgressCallback = Callable[[int, int, str], None]
"""``progress(done, total, message)``: a bar in the CLI, ``st.progress`` in the dashboard."""


def data_dir() -> Path:
    """The data directory, created on demand."""
    path = Path(os.environ.get("PHENOFORGE_DATA_DIR", REPO_ROOT / "data")).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


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


def no_progress(done: int, total: int, message: str) -> None:
    """Default progress callback: says nothing."""

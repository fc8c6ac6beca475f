"""Reading and rewriting stored ``.npz`` files in tests, to corrupt or forge them the way a user's disk might."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def read_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as stored:
        return {name: stored[name] for name in stored.files}


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def rewrite_npz(path: Path, **changes: np.ndarray) -> None:
    """The file with ``changes`` replacing (or adding) arrays, everything else as stored."""
    write_npz(path, {**read_npz(path), **changes})

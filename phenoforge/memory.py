"""Allocator settings for a process that does long batch work (the CLI, ``bench/``).

glibc raises its mmap threshold each time a large block is freed, up to 32 MB, so after the first
few freed score matrices every later one comes from the heap, and the heap's freed pages stay
resident. A benchmark frees many such arrays (5,000-deep rankings, feature matrices, per-library
tables): with the threshold fixed at 128 kB (glibc's starting value) they are mapped and unmapped
instead. Measured on the bundled benchmark with every method: peak RSS about 80 MB lower.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number (malloc.h)."""
MMAP_THRESHOLD_BYTES = 128 * 1024

_APPLIED: list[bool] = []


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD_BYTES`` for this process (once); True if set.

    A no-op (False) off Linux, without glibc's ``mallopt``, or when the user chose a threshold
    through ``MALLOC_MMAP_THRESHOLD_`` already.
    """
    if _APPLIED:
        return _APPLIED[0]
    applied = False
    if sys.platform.startswith("linux") and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        try:
            mallopt = ctypes.CDLL("libc.so.6").mallopt
        except (OSError, AttributeError):  # not glibc (musl has neither libc.so.6 nor mallopt)
            mallopt = None
        if mallopt is not None:
            applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    _APPLIED.append(applied)
    return applied

"""One writer at a time across processes, for everything phenoforge builds under ``data/``."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path


@contextmanager
def file_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``lock_path``; other processes wait, then find it built."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def file_lock_polled(lock_path: Path, waiting: Callable[[], None], poll: float = 0.5) -> Iterator[None]:
    """``file_lock``, calling ``waiting()`` every ``poll`` seconds while another holder keeps it (a progress
    display of the other holder's work); a holder killed mid-work releases it with its process."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waiting()
                time.sleep(poll)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lock_if_writable(lock_path: Path) -> AbstractContextManager[None]:
    """``file_lock(lock_path)``, or no lock when its folder cannot be written (nothing will be stored there then)."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a"):
            pass
    except OSError:
        return nullcontext()
    return file_lock(lock_path)

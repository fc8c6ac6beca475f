"""Writing files safely: temporary names that carry the writer's pid, their clean-up, and disk-full errors.

Every atomic writer (a library folder, the vocabulary database) writes a temporary sibling named
``.<name>.<pid>.<8 hex>.tmp`` (or ``.old`` for the copy it replaces) and renames it into place. A
process killed mid-write leaves that sibling behind; the next writer in the same folder removes the
ones whose process is gone, and never one of a live process.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from phenoforge.errors import DiskFullError, PhenoforgeError


def sha256_file(path: Path) -> str:
    """The file's SHA-256, read in 4 MiB blocks (a vector file is 150 MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


_TEMPORARY = re.compile(r"^\..+\.(?P<pid>\d+)\.[0-9a-f]{8}\.(?:tmp|old|spill)(?:\.wal)?$")
_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_DISK_FULL_TEXTS = ("no space left on device", "disk is full", "disk quota exceeded")


def temporary_sibling(dest: Path, kind: str = "tmp") -> Path:
    """A unique hidden sibling of ``dest`` that names this process: ``.<name>.<pid>.<hex>.<kind>``."""
    return dest.with_name(f".{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.{kind}")


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through ``write`` into a temporary sibling, then rename it into place: a reader sees
    the old file or the whole new one; what killed writers left in the folder goes first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    tmp = temporary_sibling(path)
    try:
        with open(tmp, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists (a pid reused by another process counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: past a C long, no process has that id
        return False
    except PermissionError:
        return True
    return True


def temporary_owner(name: str) -> int | None:
    """The process id a temporary sibling's name carries (``temporary_sibling``), None for any other name."""
    match = _TEMPORARY.match(name)
    return int(match["pid"]) if match else None


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Remove the temporaries in ``folder`` left by processes that no longer run; returns what went."""
    removed: list[Path] = []
    try:
        children = list(Path(folder).iterdir())
    except OSError:
        return removed
    for child in children:
        match = _TEMPORARY.match(child.name)
        if match is None or process_alive(int(match["pid"])):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
        if not child.exists():
            removed.append(child)
    return removed


def is_disk_full(error: BaseException) -> bool:
    """An OSError with ENOSPC/EDQUOT, or a database error that says the disk is full."""
    if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS:
        return True
    text = str(error).lower()
    return any(phrase in text for phrase in _DISK_FULL_TEXTS)


LOW_SPACE_BYTES = 4 << 20
"""Below this much free space, an I/O error SQLite reports ("disk I/O error") is taken for a full disk."""


def is_io_error(error: BaseException) -> bool:
    """SQLite's own words for a failed read or write (a full disk that stopped its WAL index growing, a
    failing or vanished mount): not a damaged database, so never a reason to move it aside."""
    return "disk i/o error" in str(error).lower()


def no_space_left(folder: Path) -> bool:
    """Whether the file system holding ``folder`` (or its nearest existing parent) is all but full."""
    for candidate in (Path(folder), *Path(folder).parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free < LOW_SPACE_BYTES
            except OSError:
                return False
    return False


def disk_full_error(what: str, path: Path, kept: str) -> DiskFullError:
    """The one message for a full disk: what could not be written, what was kept, what to do."""
    return DiskFullError(f"disk full while writing {what} ({path}): {kept}; free some space and try again")


def read_user_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a file the user named, at most ``limit`` of them: a device (``/dev/zero``), a pipe or a
    socket is refused before it is opened (reading one never ends, or blocks), a larger file after ``limit``.

    ``FileNotFoundError`` and ``IsADirectoryError`` pass through for the caller's own words; other refusals
    are a ``PhenoforgeError`` naming ``what`` the file was meant to be.
    """
    mode = os.stat(path).st_mode  # follows a symbolic link: what would be read
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    if not stat.S_ISREG(mode):
        raise PhenoforgeError(f"{path}: not a regular file (a device, pipe or socket); give {what}")
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise PhenoforgeError(f"{path}: larger than {limit:,} bytes, the most {what} may hold; split it")
    return data

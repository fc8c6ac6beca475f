"""Where a library command may write: never the data directory, the libraries folder or a folder of the user's.

``library import``, ``library fetch-ohdsi`` and ``library build-scale`` share this check; ``write_library``
itself then refuses to replace any folder phenoforge cannot prove it wrote (``check_replaceable``).
"""

from __future__ import annotations

from pathlib import Path

from phenoforge.config import data_dir, libraries_dir
from phenoforge.engine.curated import check_replaceable, list_libraries
from phenoforge.errors import LibraryError
from phenoforge.libraries.bundled import RESERVED_DIRS


def check_library_target(
    target: Path, overwrite: bool, library_id: str | None = None, own_dir: str = "", id_option: bool = True
) -> None:
    """Refuse a destination whose replacement would lose someone's files, and a library id already taken.

    ``overwrite`` (``--force``) replaces only a library phenoforge wrote, never the data directory, the
    libraries folder, a folder holding either, or a folder the set-up writes (other than ``own_dir``,
    the reserved folder the calling command itself fills). ``library_id`` is checked against the installed
    libraries when ``target`` is itself installed (a folder of the libraries folder); None skips that;
    ``id_option`` says whether the command has an ``--id`` to suggest.
    """
    root = libraries_dir()
    resolved = target.resolve()
    for folder, what in ((data_dir().resolve(), "the data directory"), (root.resolve(), "the libraries folder")):
        if resolved == folder or resolved in folder.parents:
            raise LibraryError(
                f"{target} is {what} or holds it; a library is never written over it: give --dest a folder of its own"
            )
    if resolved in {(root / name).resolve() for name in RESERVED_DIRS if name != own_dir}:
        raise LibraryError(f"{target} is where a bundled library lives; choose another --id or --dest")
    check_replaceable(target, overwrite)
    if library_id is None or resolved.parent != root.resolve():
        return  # only the libraries folder's own folders are installed: only there can an id shadow another
    for library in list_libraries(root, errors=[]):
        if library.library_id == library_id and library.path.resolve() != resolved:
            fix = "choose another --id" if id_option else f"replace it (--dest {library.path} --force) or remove it"
            raise LibraryError(
                f"library id {library_id!r} is already used by {library.path}; ids are unique across "
                f"installed libraries: {fix}"
            )

"""Finding installed libraries by what a user types: an id, a folder name or a path."""

from __future__ import annotations

import sys
from pathlib import Path

from phenoforge.errors import PhenoforgeError


def is_bundled(library) -> bool:  # noqa: ANN001 - a curated Library
    """Whether a library is one ``build`` writes from a pinned package (its folder; imports may not use those)."""
    from phenoforge.config import libraries_dir
    from phenoforge.libraries.bundled import BUNDLED_DIRS

    path = Path(library.path).resolve()
    return path.parent == libraries_dir().resolve() and path.name in BUNDLED_DIRS


def resolve_library_dirs(names: list[str] | None, bundled_only: bool = False) -> list[Path]:
    """Library folders by id, folder name or path; every installed (or bundled) library when none is named."""
    from phenoforge.engine.curated import list_libraries

    if names and all((Path(name) / "manifest.json").is_file() for name in names):
        return [Path(name) for name in names]
    broken: list[str] = []
    installed = list_libraries(errors=broken)
    if not names:
        for problem in broken:  # a broken library is reported and skipped; the others still run
            print(f"warning: skipped a broken library: {problem}", file=sys.stderr)
        chosen = [library for library in installed if is_bundled(library)] if bundled_only else installed
        if not installed:
            raise PhenoforgeError("no cohort library is installed: run `python -m phenoforge build`")
        if not chosen:
            installed_ids = ", ".join(library.library_id for library in installed)
            raise PhenoforgeError(
                f"no bundled library is built (run `python -m phenoforge build`); "
                f"name an installed one with --library: {installed_ids}"
            )
        return [library.path for library in chosen]
    found = []
    for name in names:
        match = [lib.path for lib in installed if name in (lib.library_id, lib.path.name)]
        if match:
            found.append(match[0])
        elif (Path(name) / "manifest.json").is_file():
            found.append(Path(name))
        else:
            known = ", ".join(lib.path.name for lib in installed) or "none"
            hint = f"; broken: {broken[0]}" if broken else ""
            raise PhenoforgeError(f"no library {name!r} (installed: {known}){hint}")
    return found

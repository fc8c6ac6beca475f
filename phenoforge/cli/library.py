"""``python -m phenoforge library import`` and ``library list``."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from phenoforge.config import libraries_dir
from phenoforge.engine.curated import list_libraries
from phenoforge.errors import PhenoforgeError
from phenoforge.libraries.bundled import ensure_bundled_libraries
from phenoforge.libraries.csv_import import LibraryImportWarning, import_library_csv


def _cmd_import(args: argparse.Namespace) -> int:
    from phenoforge.engine.db import connect

    try:
        con = connect()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", LibraryImportWarning)
                manifest = import_library_csv(
                    con,
                    args.file,
                    dest=args.dest,
                    library_id=args.id,
                    name=args.name,
                    overwrite=args.force,
                )
        finally:
            con.close()
    except PhenoforgeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2  # as every command: a user error is one line and exit code 2
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    dest = Path(args.dest) if args.dest else libraries_dir() / manifest.library_id
    print(
        f"imported {manifest.library_id!r} into {dest}: {manifest.stats.n_cohorts} cohort(s), "
        f"{manifest.stats.n_listed_codes} code(s), "
        f"{manifest.stats.n_codes_not_in_vocabulary} not in the vocabulary"
    )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    root = Path(args.root) if args.root else libraries_dir()
    if not args.no_build:
        from phenoforge.engine.db import connect

        try:
            con = connect()
            try:
                ensure_bundled_libraries(con, root=root)
            finally:
                con.close()
        except PhenoforgeError as error:  # still list what is there
            print(f"warning: the bundled libraries could not be built: {error}", file=sys.stderr)
    broken: list[str] = []
    libraries = list_libraries(root, errors=broken)
    for problem in broken:  # reported and skipped: one broken library must not hide the others
        print(f"warning: skipped a broken library: {problem}", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                [
                    {"path": str(lib.path), **lib.manifest.model_dump(exclude={"cohorts", "report"})}
                    for lib in libraries
                ],
                indent=1,
            )
        )
        return 0
    if not libraries:
        print(f"no libraries under {root}")
        return 0
    from phenoforge.setbuild.groups import is_development_library, is_test_library, library_group

    def role(manifest: object) -> str:
        """What the benchmark does with a library (docs/results.md): its scores shaped the design, are only
        reported, or it is a user's library, scored and never trained on."""
        if is_development_library(manifest):  # type: ignore[arg-type]
            return "development"
        return "test" if is_test_library(manifest) else "scored only"  # type: ignore[arg-type]

    rows = [("library_id", "group", "role", "cohorts", "codes", "not in vocab", "path")] + [
        (
            lib.library_id,
            library_group(lib.manifest),
            role(lib.manifest),
            str(lib.manifest.stats.n_cohorts),
            str(lib.manifest.stats.n_listed_codes),
            str(lib.manifest.stats.n_codes_not_in_vocabulary),
            str(lib.path),
        )
        for lib in libraries
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[6])
    return 0


def register_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``library import`` and ``library list`` to the ``library`` command's subparsers."""
    importer = subparsers.add_parser(
        "import",
        help="import a cohort library from a CSV (cohort_id, cohort_name, code[, description])",
        description="Write a cohort library from a CSV with columns cohort_id, cohort_name, "
        "code and optionally description; codes may be typed dotted or not. Bad rows are all "
        "reported with their line numbers and nothing is written.",
    )
    importer.add_argument("file", type=Path, metavar="FILE.csv")
    importer.add_argument("--id", help="library id (default: from the file name)")
    importer.add_argument("--name", help="display name (default: the file name)")
    importer.add_argument("--dest", type=Path, help="library directory (default: <data>/libraries/<id>)")
    importer.add_argument(
        "--force",
        action="store_true",
        help="replace an existing library at the destination: only a folder holding a phenoforge library "
        "(manifest.json), never the data directory, the libraries folder or a bundled library",
    )
    importer.set_defaults(func=_cmd_import)

    lister = subparsers.add_parser("list", help="list installed cohort libraries")
    lister.add_argument("--root", type=Path, help="libraries folder (default: <data>/libraries)")
    lister.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lister.add_argument("--no-build", action="store_true", help="do not build missing bundled libraries first")
    lister.set_defaults(func=_cmd_list)

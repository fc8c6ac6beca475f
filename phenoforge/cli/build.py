"""``build`` (the vocabulary, the bundled libraries, the dense index, the set builders) and ``clean``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from phenoforge.cli.common import _dense_or_none
from phenoforge.config import vocab_db_path
from phenoforge.console import progress_bar
from phenoforge.errors import PhenoforgeError


def cmd_build(args: argparse.Namespace) -> int:
    from phenoforge.engine.db import connect, database_state, ensure_vocabulary, vocabulary_info

    started = time.perf_counter()
    with progress_bar(not args.quiet) as progress:
        if args.athena:
            from phenoforge.athena.loader import load_athena

            report = load_athena(Path(args.athena), vocab_db_path(), progress=progress)
            print(report.summary())
        else:
            was_corrupt = database_state(vocab_db_path()) == "corrupt"
            ensure_vocabulary(progress=progress, force=args.force)
            if was_corrupt:
                print(
                    "note: the vocabulary database was corrupt and has been rebuilt with a new build id; "
                    + (
                        "run `python -m phenoforge build` without --no-dense to rebuild the dense index"
                        if args.no_dense
                        else "the bundled libraries and the dense index are rebuilt next"
                    )
                )
        con = connect()
        info = vocabulary_info(con)
        print(
            f"vocabulary: {info.vocabulary_release}, {info.n_icd10cm:,} ICD-10-CM nodes "
            f"({info.n_billable:,} billable), built {info.built_at}"
        )
        if not args.skip_libraries:
            from phenoforge.libraries import build_bundled_libraries

            for manifest in build_bundled_libraries(con, progress=progress, force=args.force):
                print(
                    f"library {manifest.library_id}: {manifest.stats.n_cohorts} cohorts, "
                    f"{manifest.stats.n_listed_codes:,} codes, "
                    f"{manifest.stats.n_codes_not_in_vocabulary} not in the vocabulary"
                )
        if not args.no_dense:
            retriever = _dense_or_none(con, True, build=True, progress=progress)
            status = retriever.status
            print(
                f"dense index: {status.state}, {status.count:,} codes ({status.model}, {status.mode}, "
                f"{status.runtime}), built {status.built_at}"
            )
            note = status.precision_note()
            if note:
                print(f"note: {note}")
        if not args.skip_libraries and not args.no_fit:
            from phenoforge.methods.set_building import fit_for_installed_libraries

            retriever = None if args.no_dense else _dense_or_none(con, True, precision_note=False)  # said above
            for scored, fitted in fit_for_installed_libraries(con, retriever, progress):
                model = "membership model" if fitted.model is not None else "no membership model"
                shipped = any(note.startswith("installed the set builders") for note in fitted.notes)
                how = "installed as shipped, fitted" if shipped else "fitted"
                print(
                    f"set builders for {scored}: {how} on {', '.join(fitted.training_libraries) or 'nothing'} ({model})"
                )
                for note in fitted.notes:
                    if note.startswith("fitted here, not installed as shipped: "):
                        print(f"  note: {note}")  # minutes instead of seconds: say why
    if not args.keep_stale:
        # everything current is written now: what no current state reads goes (a failure is a warning)
        _prune_models(con, dry_run=False, verbose=False, prefix="stale: ")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def _prune_models(con, dry_run: bool, verbose: bool, prefix: str = "") -> bool:  # noqa: ANN001
    """Prune data/models against the state later commands load (the dense index when it is ready) and print what
    went (``phenoforge.prune``); False when something could not be removed."""
    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.prune import PruneError, describe, prune

    try:
        result = prune(con, load_dense_if_ready(con), dry_run=dry_run)
    except (PruneError, PhenoforgeError) as error:  # after a build, a warning: what it built stands
        print(f"{prefix}data/models not pruned: {error}", file=sys.stderr)
        return False
    lines = describe(result, verbose=verbose)
    quiet = not verbose and not result.removed and not result.failed
    for line in lines[:-1]:
        print(f"{prefix}{line}", file=sys.stderr if line.startswith("could not") else sys.stdout)
    if not quiet:
        print(f"{prefix}{lines[-1]}")
    return not result.failed


def cmd_clean(args: argparse.Namespace) -> int:
    from phenoforge.engine.db import connect, database_state

    state = database_state(vocab_db_path())
    if state != "current":  # never built here: clean does not build, and cannot tell what is current without it
        raise PhenoforgeError(
            f"the vocabulary database ({vocab_db_path()}) is {state}: which files under data/models are current "
            "cannot be told, nothing was removed; `python -m phenoforge build` builds it and then prunes"
        )
    return 0 if _prune_models(connect(build=False), dry_run=args.dry_run, verbose=True) else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    build = sub.add_parser("build", help="build the vocabulary, the bundled libraries and the dense index")
    build.add_argument("--force", action="store_true", help="rebuild even if up to date")
    build.add_argument("--athena", metavar="DIR", help="load an Athena vocabulary download instead")
    build.add_argument("--no-dense", action="store_true", help="skip the dense index (about a minute)")
    build.add_argument("--skip-libraries", action="store_true", help="skip the bundled cohort libraries")
    build.add_argument(
        "--no-fit",
        action="store_true",
        help="do not fit the set builders now (they are fitted on first use instead)",
    )
    build.add_argument(
        "--keep-stale",
        action="store_true",
        help="keep the files under data/models no current state reads (by default build removes them at the end "
        "and lists each one; see `clean`)",
    )
    build.add_argument("--quiet", action="store_true", help="no progress bars")
    build.set_defaults(func=cmd_build)

    clean = sub.add_parser(
        "clean",
        help="remove stale files under data/models (old vocabulary builds, libraries, indexes, packages)",
        description="Removes what no current state reads under data/models: node tables, word counts and curated "
        "knowledge of other vocabulary builds or libraries, fitted set builders, membership models and tuned "
        "parameters no current fit uses, ONNX exports of other model packages or torch versions, temporaries of "
        "processes that no longer run. Current files, files another process holds the lock of, files it does "
        "not recognise and symbolic links are kept. `build` does this at its end.",
    )
    clean.add_argument(
        "--dry-run", action="store_true", help="list what would be removed and the bytes it would free; remove nothing"
    )
    clean.set_defaults(func=cmd_clean)

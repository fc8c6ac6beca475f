"""``sweep``: a method's fusion weight against curated ground truth, cross-validated over cohorts."""

from __future__ import annotations

import argparse
import json
import sys

from phenoforge.cli.benchmark import _cohorts_in_every_library
from phenoforge.cli.common import _connect, _dense_or_none, _weights
from phenoforge.console import positive_int, progress_bar
from phenoforge.libraries.resolve import resolve_library_dirs
from phenoforge.setbuild.builders import builder_names

DEFAULT_SWEEP_WEIGHTS = [round(step / 10, 1) for step in range(11)]


def cmd_sweep(args: argparse.Namespace) -> int:
    """A method's dense_weight per library: the in-sample best beside the cross-validated choice."""
    from phenoforge.eval.sweep import SweepError, check_sweepable, sweep_library

    method = args.method
    check_sweepable(method)  # before any work: an unsweepable method is a one-line error
    con = _connect()
    dense = _dense_or_none(con, True)
    if dense is None:
        print(
            "the sweep compares dense weights: it needs the dense index (`python -m phenoforge build`)", file=sys.stderr
        )
        return 1
    fits: dict[str, tuple[list[str], list[str]]] = {}  # library id -> (trained on, notes) of a set builder
    rows: list[tuple[str, float, float, float, float]] = []
    choices = {}
    skipped: dict[str, list[str]] = {}  # library id -> the cohorts it leaves out, as the benchmark lists them
    library_dirs = resolve_library_dirs(args.library, bundled_only=True)
    cohort_ids = _cohorts_in_every_library(library_dirs, args.cohorts) or None
    with progress_bar(not args.quiet and not args.json) as progress:
        for library_dir in library_dirs:
            swept = sweep_library(
                con,
                library_dir,
                method,
                args.weights,
                dense,
                cohort_ids=cohort_ids,
                k=args.k,
                fanout_threshold=args.fanout_threshold,
                n_folds=args.folds,
                progress=progress,
            )
            if swept.skipped:
                skipped[swept.library_id] = swept.skipped
            if swept.trained_on is not None:
                fits[swept.library_id] = (swept.trained_on, swept.notes)
            rows.extend(
                (swept.library_id, row.dense_weight, row.coverage, row.over_inclusion, row.hierarchical_score)
                for row in swept.rows
            )
            if swept.choice is not None:
                choices[swept.library_id] = swept.choice
    if not rows:
        left_out = "; ".join(line for lines in skipped.values() for line in lines[:3])
        raise SweepError(f"nothing to sweep: no chosen cohort has ground-truth codes to score against ({left_out})")
    if args.json:
        print(
            json.dumps(
                {
                    "rows": [
                        dict(
                            zip(
                                ["library", "dense_weight", "coverage", "over_inclusion", "hierarchical_score"],
                                row,
                                strict=True,
                            )
                        )
                        for row in rows
                    ],
                    "cross_validated": {library_id: choice.model_dump() for library_id, choice in choices.items()},
                    "skipped": skipped,
                    **(
                        {
                            "method": method,
                            "fitted": {
                                library_id: {"trained_on": trained_on, "notes": notes}
                                for library_id, (trained_on, notes) in fits.items()
                            },
                        }
                        if method != "hybrid"
                        else {}
                    ),
                },
                indent=1,
            )
        )
        return 0
    if method != "hybrid":
        print(
            f"{method}: sweeping dense_weight of the fused ranking it builds from; its own parameters stay as "
            "fitted leave-one-library-group-out on the other libraries"
        )
        for library_id, (trained_on, _notes) in fits.items():
            print(f"  {library_id}: fitted on {', '.join(trained_on) or 'nothing (untuned defaults)'}")
    print(f"{'library':<22}{'weight':>7}{'coverage':>10}{'over-incl':>11}{'hier.':>8}")
    for library_id, weight, coverage, penalty, score in rows:
        print(f"{library_id:<22}{weight:>7.2f}{coverage:>10.3f}{penalty:>11.3f}{score:>8.3f}")
    for library_id, lines in skipped.items():
        print(f"{library_id}: skipped {len(lines)} cohort(s): {'; '.join(lines)}")
    for library_id, choice in choices.items():
        print(
            f"{library_id}: in-sample best dense_weight={choice.in_sample_choice:.2f} "
            f"(hierarchical {choice.in_sample_score:.3f}, chosen and scored on the same cohorts); "
            f"cross-validated {choice.out_of_sample_score:.3f} ({choice.n_folds} folds: chosen on the other "
            f"folds, scored on the held-out one; choices {', '.join(f'{c:.2f}' for c in choice.choices_per_fold)})"
        )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sweep = sub.add_parser(
        "sweep",
        help="sweep a method's dense_weight against curated ground truth, cross-validated over cohorts",
        description="Sweeps dense_weight: for hybrid, dense's share of the fused ranking cut at k; for a set "
        f"builder ({', '.join(builder_names())}), dense's share of the fused ranking it builds from. A set "
        "builder's own parameters (cut-off, subtree shares, membership model and threshold, transfer "
        "similarity) are fitted leave-one-library-group-out and are not re-chosen here.",
    )
    sweep.add_argument(
        "--method",
        default="hybrid",
        help=f"the method to sweep: hybrid (default) or a set builder ({', '.join(builder_names())}); "
        "-k applies to hybrid only",
    )
    sweep.add_argument(
        "--library",
        action="append",
        help="library id, folder name or path to sweep (repeatable; default: every bundled library, "
        "not imported ones); each library gets its own rows and cross-validated choice",
    )
    sweep.add_argument(
        "--cohorts",
        nargs="+",
        metavar="COHORT_ID",
        help="only these cohort ids (default: every cohort of each library); cross-validation needs at least two",
    )
    sweep.add_argument(
        "--weights",
        type=_weights,
        default=DEFAULT_SWEEP_WEIGHTS,
        metavar="W,W,...",
        help="comma-separated dense_weight values in [0, 1] to try, e.g. 0,0.25,0.5 "
        f"(default: {','.join(f'{w:g}' for w in DEFAULT_SWEEP_WEIGHTS)})",
    )
    sweep.add_argument("-k", type=positive_int("k"), default=25, help="hybrid's cut-off: codes kept (default: 25)")
    sweep.add_argument(
        "--folds",
        type=positive_int("folds"),
        default=5,
        help="cross-validation folds over cohorts for the out-of-sample figure (default: 5)",
    )
    sweep.add_argument(
        "--fanout-threshold",
        type=positive_int("fanout-threshold"),
        default=100,
        help="skip (and report) a curated concept more than this many ICD-10-CM codes map to (default: 100)",
    )
    sweep.add_argument("--json", action="store_true", help="rows, cross-validated choices and fits as JSON")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.set_defaults(func=cmd_sweep)

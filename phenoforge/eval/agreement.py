"""The expert-agreement line: how closely two curated libraries agree where they define one condition.

A method's score against a curated list is only meaningful beside what two expert lists for the
same condition score against each other under the same metric: that is the ceiling a method can be
expected to reach, not 1.0. The crosswalk (``crosswalk.csv`` next to this module) declares which
cohorts of one library describe the same condition as a cohort of another, with a note per row; it
was written from the cohorts' names and definitions, before any pair was scored. Two lists from one
paper (Quan's Charlson and Elixhauser share several lists verbatim) are not independent experts and
are not listed.

Each pair is scored with the benchmark's own ``score_cohort`` in both directions (each list once as
the reference). The hierarchical score is symmetric on a tree (swapping the lists swaps coverage and
precision inside a harmonic mean) and exact F1 always is; the pair's score is the mean of the two
directions, so a DAG-shaped vocabulary cannot make it depend on which library is named first.
Pairs inside one library group (CMS-HCC V24 and V28; AHRQ and Quan Elixhauser) are versions or
recodings of one source, not independent experts: they are scored and listed but kept out of the
line unless asked for.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Sequence
from pathlib import Path

import duckdb
from pydantic import BaseModel, Field

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.curated import Library, library_group, list_libraries, load_curated_concept_set
from phenoforge.errors import CrosswalkError, LibraryError
from phenoforge.eval.scoring import score_cohort

CROSSWALK_PATH = Path(__file__).with_name("crosswalk.csv")
CROSSWALK_COLUMNS = ("library_a", "cohort_a", "library_b", "cohort_b", "note")


class CrosswalkRow(BaseModel):
    library_a: str
    cohort_a: str
    library_b: str
    cohort_b: str
    note: str
    line: int


class Crosswalk(BaseModel):
    path: str
    rows: list[CrosswalkRow]


def load_crosswalk(path: Path | str | None = None) -> Crosswalk:
    """Read and check a crosswalk CSV: every field filled, no self-pairs, no pair listed twice."""
    path = Path(path) if path is not None else CROSSWALK_PATH
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise CrosswalkError(f"{path}: no crosswalk file here") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CrosswalkError(f"{path}: cannot be read ({error}); save it as UTF-8 CSV") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [column for column in CROSSWALK_COLUMNS if column not in (reader.fieldnames or [])]
    if missing:
        raise CrosswalkError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(CROSSWALK_COLUMNS)}")
    rows: list[CrosswalkRow] = []
    seen: dict[frozenset[tuple[str, str]], int] = {}
    problems: list[str] = []
    for row in reader:
        line = reader.line_num
        values = {column: (row.get(column) or "").strip() for column in CROSSWALK_COLUMNS}
        empty = [column for column, value in values.items() if not value]
        if empty:
            problems.append(f"line {line}: empty {', '.join(empty)}")
            continue
        a, b = (values["library_a"], values["cohort_a"]), (values["library_b"], values["cohort_b"])
        if a[0] == b[0]:
            problems.append(f"line {line}: both cohorts are in library {a[0]!r}; pair cohorts of different libraries")
            continue
        key = frozenset((a, b))
        if key in seen:
            problems.append(f"line {line}: the pair is already listed on line {seen[key]}")
            continue
        seen[key] = line
        rows.append(CrosswalkRow(**values, line=line))
    if problems:
        raise CrosswalkError(f"{path}: {len(problems)} problem(s): " + "; ".join(problems[:10]))
    if not rows:
        raise CrosswalkError(f"{path}: no pairs below the header")
    return Crosswalk(path=str(path), rows=rows)


class PairAgreement(BaseModel):
    """Two curated lists for one condition scored against each other."""

    library_a: str
    cohort_a: str
    cohort_name_a: str
    library_b: str
    cohort_b: str
    cohort_name_b: str
    note: str
    same_group: bool = Field(description="both libraries are in one group: not independent experts")
    n_codes_a: int
    n_codes_b: int
    coverage_of_a: float = Field(description="how well list b covers list a (a as the reference)")
    coverage_of_b: float = Field(description="how well list a covers list b (b as the reference)")
    hierarchical_a_reference: float
    hierarchical_b_reference: float
    hierarchical_score: float = Field(description="mean of the two directions")
    exact_f1: float


class LibraryAgreement(BaseModel):
    """One library's expert-agreement line: the mean over the crosswalk pairs it takes part in."""

    library_id: str
    n_pairs: int
    mean_hierarchical_score: float
    mean_exact_f1: float


class AgreementReport(BaseModel):
    crosswalk: str
    include_same_group: bool
    pairs: list[PairAgreement]
    by_library: dict[str, LibraryAgreement]
    skipped: list[str] = Field(default_factory=list, description="crosswalk rows not scored, with the reason")


def _library_means(pairs: Sequence[PairAgreement], include_same_group: bool) -> dict[str, LibraryAgreement]:
    scores: dict[str, list[tuple[float, float]]] = {}
    for pair in pairs:
        if pair.same_group and not include_same_group:
            continue
        for library_id in (pair.library_a, pair.library_b):
            scores.setdefault(library_id, []).append((pair.hierarchical_score, pair.exact_f1))
    return {
        library_id: LibraryAgreement(
            library_id=library_id,
            n_pairs=len(values),
            mean_hierarchical_score=sum(h for h, _f in values) / len(values),
            mean_exact_f1=sum(f for _h, f in values) / len(values),
        )
        for library_id, values in sorted(scores.items())
    }


def expert_agreement(
    con: duckdb.DuckDBPyConnection,
    crosswalk: Crosswalk | Path | str | None = None,
    libraries: Sequence[Library] | None = None,
    include_same_group: bool = False,
    fanout_threshold: int = 100,
    progress: ProgressCallback | None = None,
) -> AgreementReport:
    """Score every crosswalk pair whose two libraries are installed; per library, the mean of its pairs.

    ``libraries`` defaults to every installed library. A row naming a library that is not there is
    skipped and listed; a row naming a cohort an installed library does not have is an error (the
    crosswalk is wrong). A cohort with no code the vocabulary knows is skipped and listed.
    """
    table = crosswalk if isinstance(crosswalk, Crosswalk) else load_crosswalk(crosswalk)
    libraries = list(libraries) if libraries is not None else list_libraries()
    by_id = {library.library_id: library for library in libraries}
    report = progress or no_progress
    curated: dict[tuple[str, str], tuple[str, list[str]]] = {}

    def codes_of(library: Library, cohort_id: str, line: int) -> tuple[str, list[str]]:
        key = (library.library_id, cohort_id)
        if key not in curated:
            try:
                library.cohort(cohort_id)
            except LibraryError:
                raise CrosswalkError(
                    f"{table.path} line {line}: library {library.library_id!r} has no cohort {cohort_id!r}; "
                    "fix the crosswalk row"
                ) from None
            concept_set = load_curated_concept_set(con, library, cohort_id, fanout_threshold)
            curated[key] = (concept_set.cohort_name, concept_set.codes)
        return curated[key]

    pairs: list[PairAgreement] = []
    skipped: list[str] = []
    for done, row in enumerate(table.rows):
        report(done, len(table.rows), f"{row.cohort_a} ~ {row.cohort_b}")
        absent = [library_id for library_id in (row.library_a, row.library_b) if library_id not in by_id]
        if absent:
            skipped.append(f"line {row.line}: library {', '.join(absent)} is not installed")
            continue
        library_a, library_b = by_id[row.library_a], by_id[row.library_b]
        name_a, codes_a = codes_of(library_a, row.cohort_a, row.line)
        name_b, codes_b = codes_of(library_b, row.cohort_b, row.line)
        empty = [cohort for cohort, codes in ((row.cohort_a, codes_a), (row.cohort_b, codes_b)) if not codes]
        if empty:
            skipped.append(f"line {row.line}: {', '.join(empty)} has no code the vocabulary knows")
            continue
        a_reference = score_cohort(con, row.cohort_a, name_a, codes_a, codes_b, f"expert:{row.library_b}")
        b_reference = score_cohort(con, row.cohort_b, name_b, codes_b, codes_a, f"expert:{row.library_a}")
        pairs.append(
            PairAgreement(
                library_a=row.library_a,
                cohort_a=row.cohort_a,
                cohort_name_a=name_a,
                library_b=row.library_b,
                cohort_b=row.cohort_b,
                cohort_name_b=name_b,
                note=row.note,
                same_group=library_group(library_a.manifest) == library_group(library_b.manifest),
                n_codes_a=len(codes_a),
                n_codes_b=len(codes_b),
                coverage_of_a=a_reference.coverage,
                coverage_of_b=b_reference.coverage,
                hierarchical_a_reference=a_reference.hierarchical_score,
                hierarchical_b_reference=b_reference.hierarchical_score,
                hierarchical_score=(a_reference.hierarchical_score + b_reference.hierarchical_score) / 2,
                exact_f1=a_reference.exact_f1,
            )
        )
    report(len(table.rows), len(table.rows), "done")
    return AgreementReport(
        crosswalk=table.path,
        include_same_group=include_same_group,
        pairs=pairs,
        by_library=_library_means(pairs, include_same_group),
        skipped=skipped,
    )


def agreement_lines(
    con: duckdb.DuckDBPyConnection,
    libraries: Sequence[Library] | None = None,
    crosswalk: Crosswalk | Path | str | None = None,
    include_same_group: bool = False,
) -> dict[str, LibraryAgreement]:
    """What the Benchmark page draws beside each method's mean: per library id, its agreement line.

    A library with no scored pair is absent from the result (the page then draws no line for it).
    """
    return expert_agreement(con, crosswalk, libraries, include_same_group=include_same_group).by_library


# --------------------------------------------------------------------------------------------
# Command line


def format_library_lines(report: AgreementReport) -> str:
    lines = [f"{'library':<24}{'pairs':>6}{'hier.':>8}{'exact F1':>10}"]
    for line in report.by_library.values():
        lines.append(
            f"{line.library_id:<24}{line.n_pairs:>6}{line.mean_hierarchical_score:>8.3f}{line.mean_exact_f1:>10.3f}"
        )
    return "\n".join(lines)


def format_pairs(report: AgreementReport) -> str:
    lines = [f"{'cohort a':<44}{'cohort b':<44}{'hier.':>7}{'F1':>7}  group"]
    for pair in report.pairs:
        lines.append(
            f"{pair.cohort_a[:43]:<44}{pair.cohort_b[:43]:<44}{pair.hierarchical_score:>7.3f}{pair.exact_f1:>7.3f}"
            f"  {'same' if pair.same_group else 'cross'}"
        )
    return "\n".join(lines)


def _cmd_agreement(args: argparse.Namespace) -> int:
    from phenoforge.engine.db import connect
    from phenoforge.libraries import ensure_bundled_libraries

    con = connect()
    try:
        if not args.no_build:
            ensure_bundled_libraries(con)
        libraries = list_libraries()
        if args.library:
            unknown = sorted(set(args.library) - {library.library_id for library in libraries})
            if unknown:
                known = ", ".join(library.library_id for library in libraries) or "none"
                print(f"error: no library {', '.join(unknown)} (installed: {known})", file=sys.stderr)
                return 2
        report = expert_agreement(con, args.crosswalk, libraries, include_same_group=args.include_same_group)
    finally:
        con.close()
    if args.library:
        report.by_library = {k: v for k, v in report.by_library.items() if k in args.library}
    if args.json:
        print(report.model_dump_json(indent=1))
        return 0
    counted = sum(1 for pair in report.pairs if args.include_same_group or not pair.same_group)
    print(
        f"expert agreement over {counted} crosswalk pairs ({report.crosswalk}); "
        + (
            "same-group pairs included"
            if args.include_same_group
            else f"{len(report.pairs) - counted} same-group pairs left out (--include-same-group)"
        )
    )
    if args.pairs:
        print(format_pairs(report))
        print()
    print(format_library_lines(report))
    if report.skipped:
        print(f"skipped: {len(report.skipped)} (e.g. {report.skipped[0]})")
    return 0


def register_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the top-level ``agreement`` command."""
    parser = subparsers.add_parser(
        "agreement",
        help="score crosswalked cohorts of different libraries against each other: the expert-agreement line",
        description="For every crosswalk pair of cohorts that define one condition in two libraries, score the "
        "two curated lists against each other with the benchmark's metric; print per library the mean "
        "hierarchical score and exact F1 of its pairs.",
    )
    parser.add_argument("--crosswalk", type=Path, help=f"crosswalk CSV (default: {CROSSWALK_PATH.name} shipped)")
    parser.add_argument("--library", action="append", help="only show this library id (repeatable)")
    parser.add_argument(
        "--include-same-group", action="store_true", help="count pairs of one library group (e.g. HCC V24/V28) too"
    )
    parser.add_argument("--pairs", action="store_true", help="also print every pair's scores")
    parser.add_argument("--no-build", action="store_true", help="do not build missing bundled libraries first")
    parser.add_argument("--json", action="store_true", help="the full report as JSON")
    parser.set_defaults(func=_cmd_agreement)

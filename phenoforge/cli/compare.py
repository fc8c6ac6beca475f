"""``compare A B``: two code lists side by side (a file, a curated cohort, a signed-off version, a saved run)."""

from __future__ import annotations

import argparse

from phenoforge.cli.common import _connect
from phenoforge.console import positive_int, printable
from phenoforge.errors import PhenoforgeError
from phenoforge.lists.comparison import CodeListComparison, named
from phenoforge.lists.sources import check_codes, read_reference


def read_list(con, spec: str) -> tuple[str, list[str]]:  # noqa: ANN001 - a DuckDB connection
    """(a name, the codes) of a list named on the command line (``phenoforge.lists.sources.read_reference``)."""
    found = read_reference(con, spec)
    return found.name, found.codes


def cmd_compare(args: argparse.Namespace) -> int:
    from phenoforge.engine.expansion import get_hierarchy
    from phenoforge.lists.comparison import compare_code_lists

    con = _connect()
    first = read_reference(con, args.first)
    second = read_reference(con, args.second)
    if not first.codes and not second.codes:
        raise PhenoforgeError(f"both lists are empty ({first.name}, {second.name}): there is nothing to compare")
    result = compare_code_lists(
        get_hierarchy(con), first.codes, second.codes, first.name, second.name, args.max_distance
    )
    if args.json:  # every code: the machine-readable whole (undefined scores are null)
        print(result.model_dump_json(indent=2))
        return 0
    for line in _text(result).splitlines():
        print(printable(line))
    for side in (first, second):
        if not side.codes:
            print(printable(f"  {side.name} is empty: every code of the other list is only there"))
        for message in check_codes(con, side.codes).messages(side.name):
            if "not billable" in message:  # the unknown ones are the comparison's own last line
                print(printable(f"  {message}"))
    return 0


def _text(result: CodeListComparison, shown: int = 20) -> str:
    """The comparison in a few lines: counts, scores, and at most ``shown`` codes per list of codes."""
    score = result.score_text
    lines = [
        f"{result.first} ({len(result.shared) + len(result.only_first)} known codes) against "
        f"{result.second} ({len(result.shared) + len(result.only_second)}):",
        f"  shared: {len(result.shared)}; only in {result.first}: {len(result.only_first)}; "
        f"only in {result.second}: {len(result.only_second)}",
        f"  {result.second} scored with {result.first} as ground truth: hierarchical {score(result.hierarchical)}, "
        f"coverage {score(result.coverage)}, over-inclusion {score(result.over_inclusion)}, "
        f"exact F1 {score(result.exact_f1)}",
    ]
    if result.undefined:
        lines.append(f"  scores undefined: {result.undefined}")
    for title, misses in (
        (f"only in {result.first}", result.near_first),
        (f"only in {result.second}", result.near_second),
    ):
        if misses:
            lines.append(f"  near misses, {title} (nearest on the other side, tree distance; {len(misses):,}):")
            lines += [f"    {miss.code:10} ~ {miss.nearest:10} distance {miss.distance}" for miss in misses[:shown]]
            if len(misses) > shown:
                lines.append(f"    ... and {len(misses) - shown:,} more (--json has every one)")
    if result.unknown_shared:
        lines.append(f"  in both lists, not in this vocabulary (counted as shared): {named(result.unknown_shared)}")
    if result.unknown:
        lines.append(f"  not in this vocabulary ({len(result.unknown):,}): {named(result.unknown, shown)}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compare = sub.add_parser(
        "compare",
        help="compare two code lists: shared codes, codes only in each, near misses by tree distance",
        description="Compares two code lists, each a file (a CSV with a 'code' column, or one code per line), "
        "LIBRARY/COHORT (an installed library's curated cohort), version:LIST@N (a signed-off version; "
        "version:LIST is the latest) or run:RUN_ID/METHOD/COHORT (one method's answer for one cohort in a saved "
        "benchmark run). The second is scored with the first as ground truth, as the benchmark scores a method.",
    )
    compare.add_argument(
        "first", help="the reference list: FILE, LIBRARY/COHORT, version:LIST@N or run:RUN/METHOD/COHORT"
    )
    compare.add_argument("second", help="the list compared with it (the same forms)")
    compare.add_argument(
        "--max-distance", type=positive_int("max-distance"), default=6, help="near misses up to this tree distance"
    )
    compare.add_argument("--json", action="store_true", help="the whole comparison as JSON")
    compare.set_defaults(func=cmd_compare)

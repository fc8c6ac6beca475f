"""``compare A B``: two code lists side by side (a file of codes, or a library's curated cohort)."""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

from phenoforge.cli.common import _connect
from phenoforge.console import positive_int
from phenoforge.errors import PhenoforgeError
from phenoforge.eval.compare import ListComparison
from phenoforge.storage import read_user_file

MAX_LIST_BYTES = 16 * 1024 * 1024


def read_list(con, spec: str) -> tuple[str, list[str]]:  # noqa: ANN001 - a DuckDB connection
    """(a name, the codes) of a list named on the command line: a file (a CSV with a ``code`` column, or one
    code per line) or ``LIBRARY/COHORT`` (an installed library's curated cohort)."""
    path = Path(spec)
    if path.is_file():
        try:
            text = read_user_file(path, MAX_LIST_BYTES, "a code list").decode("utf-8-sig")
        except UnicodeDecodeError:
            raise PhenoforgeError(f"{spec}: not UTF-8 text; save the list as UTF-8") from None
        return path.name, _codes_of(text, spec)
    library, _, cohort = spec.rpartition("/")
    if library and cohort:
        from phenoforge.eval.qrels import load_qrels
        from phenoforge.libraries.resolve import resolve_library_dirs

        (library_dir,) = resolve_library_dirs([library])
        qrels = load_qrels(con, library_dir, [cohort])
        curated = qrels.cohorts.get(cohort)
        if curated is None:
            raise PhenoforgeError(f"{spec}: the cohort's list cannot be read ({'; '.join(qrels.skipped) or 'empty'})")
        return spec, [*curated.codes, *curated.unresolvable]
    raise PhenoforgeError(
        f"{spec!r} is neither a file nor LIBRARY/COHORT (e.g. elixhauser-2026.1/elix-HF; "
        "`python -m phenoforge library list` names the libraries)"
    )


def _codes_of(text: str, name: str) -> list[str]:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return []
    header = [cell.strip().lower() for cell in rows[0]]
    if "code" in header:
        column = header.index("code")
        return [row[column].strip() for row in rows[1:] if len(row) > column and row[column].strip()]
    if len(header) > 1:
        raise PhenoforgeError(f"{name}: a CSV of several columns needs one named 'code'")
    return [row[0].strip() for row in rows if row and row[0].strip()]


def cmd_compare(args: argparse.Namespace) -> int:
    from phenoforge.engine.expansion import get_hierarchy
    from phenoforge.eval.compare import compare_lists

    con = _connect()
    first_name, first = read_list(con, args.first)
    second_name, second = read_list(con, args.second)
    if not first and not second:
        raise PhenoforgeError("both lists are empty: there is nothing to compare")
    result = compare_lists(get_hierarchy(con), first, second, first_name, second_name, args.max_distance)
    print(result.model_dump_json(indent=2) if args.json else _text(result))
    return 0


def _text(result: ListComparison) -> str:
    lines = [
        f"{result.first} ({len(result.shared) + len(result.only_first)} known codes) against "
        f"{result.second} ({len(result.shared) + len(result.only_second)}):",
        f"  shared: {len(result.shared)}; only in {result.first}: {len(result.only_first)}; "
        f"only in {result.second}: {len(result.only_second)}",
        f"  {result.second} scored with {result.first} as ground truth: hierarchical {result.hierarchical:.3f}, "
        f"coverage {result.coverage:.3f}, over-inclusion {result.over_inclusion:.3f}, exact F1 {result.exact_f1:.3f}",
    ]
    for title, misses in (
        (f"only in {result.first}", result.near_first),
        (f"only in {result.second}", result.near_second),
    ):
        if misses:
            lines.append(f"  near misses, {title} (nearest on the other side, tree distance):")
            lines += [f"    {miss.code:10} ~ {miss.nearest:10} distance {miss.distance}" for miss in misses]
    if result.unknown:
        lines.append(f"  not in this vocabulary: {', '.join(result.unknown)}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compare = sub.add_parser(
        "compare",
        help="compare two code lists: shared codes, codes only in each, near misses by tree distance",
        description="Compares two code lists, each a file (a CSV with a 'code' column, or one code per line) or "
        "LIBRARY/COHORT (an installed library's curated cohort). The second is scored with the first as ground "
        "truth, as the benchmark scores a method.",
    )
    compare.add_argument("first", help="the reference list: FILE or LIBRARY/COHORT")
    compare.add_argument("second", help="the list compared with it: FILE or LIBRARY/COHORT")
    compare.add_argument(
        "--max-distance", type=positive_int("max-distance"), default=6, help="near misses up to this tree distance"
    )
    compare.add_argument("--json", action="store_true", help="the whole comparison as JSON")
    compare.set_defaults(func=cmd_compare)

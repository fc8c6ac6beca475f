"""Where a code list to compare comes from: a file or an upload, a curated cohort, a signed-off version, a saved run.

A reference reads as the command line writes it:

- ``FILE`` — a CSV with a ``code`` column, or one code per line (UTF-8);
- ``LIBRARY/COHORT`` — an installed library's curated cohort (``elixhauser-2026.1/elix-HF``);
- ``version:LIST@N`` — version N of a signed-off list (``version:LIST`` is its latest);
- ``run:RUN_ID/METHOD/COHORT`` — what one method of a saved benchmark run answered for one cohort.

Every code of a list is kept as it was given; :func:`check_codes` names those the vocabulary does not know and
those that are not billable, so a list is never compared with codes silently dropped.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from pathlib import Path
from typing import Literal

import duckdb
from pydantic import BaseModel, Field

from phenoforge.errors import PhenoforgeError
from phenoforge.storage import read_user_file

MAX_LIST_BYTES = 16 * 1024 * 1024
VERSION_PREFIX = "version:"
RUN_PREFIX = "run:"

SourceKind = Literal["file", "upload", "cohort", "version", "run"]


class CodeList(BaseModel):
    """A list to compare: its name, kind and codes, as given."""

    name: str
    kind: SourceKind
    codes: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class CodeCheck(BaseModel):
    """The codes of a list the vocabulary does not know, and the known ones that are not billable."""

    unknown: list[str] = Field(default_factory=list)
    not_billable: list[str] = Field(default_factory=list)

    def messages(self, name: str) -> list[str]:
        """One line per kind, naming at most ``SHOWN`` codes and counting the rest (a million unknown codes make
        one short line, not ten megabytes)."""
        from phenoforge.lists.comparison import named

        out = []
        if self.unknown:
            out.append(f"{name}: not in this vocabulary ({len(self.unknown):,}): {named(self.unknown)}")
        if self.not_billable:
            out.append(
                f"{name}: not billable ({len(self.not_billable):,}; a category or block, not a code a claim "
                f"carries): {named(self.not_billable)}"
            )
        return out


def check_codes(con: duckdb.DuckDBPyConnection, codes: list[str]) -> CodeCheck:
    from phenoforge.engine.expansion import get_hierarchy

    hierarchy = get_hierarchy(con)
    out = CodeCheck()
    for code in dict.fromkeys(codes):
        node = hierarchy.resolve(code)
        if node is None:
            out.unknown.append(code)
        elif not hierarchy.billable.get(node, False):
            out.not_billable.append(code)
    return out


def codes_of_text(text: str, name: str) -> list[str]:
    """The codes of a CSV with a ``code`` column, or of one code per line."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return []
    header = [cell.strip().lower().lstrip("\ufeff") for cell in rows[0]]
    if "code" in header:
        column = header.index("code")
        return [row[column].strip() for row in rows[1:] if len(row) > column and row[column].strip()]
    if len(header) > 1:
        raise PhenoforgeError(f"{name}: a CSV of several columns needs one named 'code'")
    return [row[0].strip() for row in rows if row and row[0].strip()]


def read_upload(name: str, data: bytes) -> CodeList:
    """An uploaded file's codes (the dashboard's upload; a file named on the command line reads the same)."""
    if len(data) > MAX_LIST_BYTES:
        raise PhenoforgeError(f"{name}: larger than {MAX_LIST_BYTES:,} bytes, the most a code list may hold; split it")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise PhenoforgeError(f"{name}: not UTF-8 text; save the list as UTF-8") from None
    return CodeList(name=name, kind="upload", codes=codes_of_text(text, name))


def read_reference(con: duckdb.DuckDBPyConnection, spec: str) -> CodeList:
    """The list ``spec`` names (see the module docstring); a ``PhenoforgeError`` that says what to write else."""
    if spec.startswith(VERSION_PREFIX):
        return version_list(spec.removeprefix(VERSION_PREFIX))
    if spec.startswith(RUN_PREFIX):
        return run_list(spec.removeprefix(RUN_PREFIX))
    path = Path(spec)
    kind = _special_file(path)
    if kind is not None:
        raise PhenoforgeError(f"{spec} is {kind}, not a file of codes: give a CSV or a text file")
    if path.is_file():
        try:
            text = read_user_file(path, MAX_LIST_BYTES, "a code list").decode("utf-8-sig")
        except UnicodeDecodeError:
            raise PhenoforgeError(f"{spec}: not UTF-8 text; save the list as UTF-8") from None
        return CodeList(name=path.name, kind="file", codes=codes_of_text(text, spec))
    if path.is_dir():
        raise PhenoforgeError(f"{spec} is a folder, not a file of codes: give a CSV or a text file")
    library, _, cohort = spec.rpartition("/")
    if library and cohort and (path.is_absolute() or path.parent.is_dir() or spec.startswith(".")):
        # a path into a folder that exists (or an absolute one) is a file that is not there, not LIBRARY/COHORT
        raise PhenoforgeError(f"{spec}: no such file (give a CSV or a text file of codes, or LIBRARY/COHORT)")
    if library and cohort:
        return cohort_list(con, library, cohort)
    raise PhenoforgeError(
        f"{spec!r} is neither a file nor LIBRARY/COHORT (e.g. elixhauser-2026.1/elix-HF), version:LIST@N or "
        "run:RUN_ID/METHOD/COHORT (`python -m phenoforge library list`, `version list` and the Benchmark page's "
        "saved runs name them)"
    )


def _special_file(path: Path) -> str | None:
    """What ``path`` is when it is a device, a pipe or a socket ('a device', ...); None otherwise."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def cohort_list(con: duckdb.DuckDBPyConnection, library: str, cohort: str) -> CodeList:
    """An installed library's curated cohort: its resolved codes, then those it lists that do not resolve."""
    from phenoforge.eval.qrels import load_qrels
    from phenoforge.libraries.resolve import resolve_library_dirs

    (library_dir,) = resolve_library_dirs([library])
    qrels = load_qrels(con, library_dir, [cohort])
    curated = qrels.cohorts.get(cohort)
    if curated is None:
        raise PhenoforgeError(
            f"{library}/{cohort}: the cohort's list cannot be read ({'; '.join(qrels.skipped) or 'empty'})"
        )
    return CodeList(name=f"{library}/{cohort}", kind="cohort", codes=[*curated.codes, *curated.unresolvable])


def version_list(ref: str) -> CodeList:
    """A signed-off version's codes (``LIST@N``, or ``LIST`` for the latest)."""
    from phenoforge.lists.store import load_ref

    version = load_ref(ref)
    return CodeList(
        name=f"version:{version.ref}",
        kind="version",
        codes=version.code_list,
        notes=[
            f"Signed off by {version.reviewer} at {version.saved_at}."
            if version.signed_off
            else f"NOT SIGNED OFF: {version.signature_check.message} (names {version.reviewer} at {version.saved_at})."
        ],
    )


def parse_run_ref(ref: str) -> tuple[str, str, str]:
    """``RUN_ID/METHOD/COHORT`` -> its three parts (a method's name may hold '/', the run id and cohort do not)."""
    run_id, _, rest = ref.partition("/")
    method, _, cohort = rest.rpartition("/")
    if not (run_id and method and cohort):
        raise PhenoforgeError(
            f"run:{ref}: write run:RUN_ID/METHOD/COHORT (e.g. run:0123abcd4567/hybrid/elix-HF); the Benchmark page "
            "lists saved runs and their ids"
        )
    return run_id, method, cohort


def run_list(ref: str) -> CodeList:
    """What one method of a saved benchmark run answered for one cohort, in its order."""
    from phenoforge import app_state

    run_id, method, cohort = parse_run_ref(ref)
    saved = app_state.load_benchmark_run(run_id)
    results = [r for r in saved.report.results if r.method == method]
    if not results:
        methods = sorted({r.method for r in saved.report.results})
        raise PhenoforgeError(f"run {run_id} has no method {method!r}; it has {', '.join(methods) or 'none'}")
    found = next((r for r in results if r.cohort_id == cohort), None)
    if found is None:
        cohorts = [r.cohort_id for r in results]
        shown = ", ".join(cohorts[:12]) + (" ..." if len(cohorts) > 12 else "")
        raise PhenoforgeError(f"run {run_id} has no cohort {cohort!r} for {method}; it has {shown}")
    return CodeList(
        name=f"run:{run_id}/{method}/{cohort}",
        kind="run",
        codes=list(found.predicted_codes),
        notes=[f"{method} on {saved.library_id}/{cohort} ({found.cohort_name}), run of {saved.finished_at}"],
    )


class RunChoice(BaseModel):
    """One saved run as a picker offers it: its methods and cohorts."""

    run_id: str
    label: str
    methods: list[str]
    cohorts: list[str]


def saved_run_choices(limit: int = 50) -> list[RunChoice]:
    """Saved benchmark runs, newest first, with the methods and cohorts each holds."""
    from phenoforge import app_state

    out = []
    for summary in app_state.list_benchmark_runs(limit=limit):
        if not summary.complete:  # its writer stopped partway: no report to read a list from
            continue
        out.append(
            RunChoice(
                run_id=summary.run_id,
                label=f"{summary.run_id} · {summary.finished_at} · {summary.library_id}"
                + (f" · {summary.label}" if summary.label else ""),
                methods=sorted({*summary.parameters.methods, *summary.means.get("hierarchical", {})}),
                cohorts=list(summary.parameters.cohort_ids),
            )
        )
    return out

"""Import a user's cohort library from a CSV of ``cohort_id, cohort_name, code[, description]`` rows."""

from __future__ import annotations

import csv
import hashlib
import io
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
from pydantic import BaseModel

from phenoforge.config import libraries_dir
from phenoforge.engine.codes import code_key
from phenoforge.engine.curated import Citation, LibraryManifest, write_library
from phenoforge.errors import ImportRowError, LibraryError
from phenoforge.libraries.common import (
    ICD_SHAPE,
    SAFE_ID,
    SourceCohort,
    SourceLibrary,
    assemble_library,
    libraries_lock,
    now_iso,
    valid_cohort_id,
)
from phenoforge.libraries.destination import check_library_target
from phenoforge.storage import read_user_file

MAX_IMPORT_BYTES = 64 << 20
"""The largest CSV ``library import`` reads (64 MiB); past it, and for a device or pipe, it refuses."""


class RowProblem(BaseModel):
    line: int
    message: str


class CsvImportError(ImportRowError):
    """Every bad row of an imported CSV at once, so a user fixes them in one pass."""

    def __init__(self, path: Path, problems: list[RowProblem], limit: int = 25) -> None:
        self.path = path
        self.problems = problems
        shown = "\n".join(f"  line {p.line}: {p.message}" for p in problems[:limit])
        more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
        super().__init__(
            f"{path}: {len(problems)} problem(s), nothing was written; fix them and import again:\n{shown}{more}"
        )


class LibraryImportWarning(UserWarning):
    """An import succeeded but something in it deserves a look (e.g. codes not in FY2026)."""


_REQUIRED_COLUMNS = ("cohort_id", "cohort_name", "code")
_OPTIONAL_COLUMNS = ("description",)


def _code_problem(raw: str) -> str | None:
    """Why ``raw`` is not an ICD-10-CM code as people type it, or None when it is one."""
    text = re.sub(r"\s+", "", raw)
    key = code_key(text)
    if key is None or not ICD_SHAPE.match(key):
        return f"code {raw.strip()!r} is not an ICD-10-CM code (expected e.g. E11.22 or E1122)"
    if "." in text and (text.count(".") > 1 or text.index(".") != 3 or text.endswith(".")):
        return f"code {raw.strip()!r} has its dot in the wrong place (expected e.g. E11.22)"
    return None


def _decode(data: bytes) -> tuple[str, list[RowProblem]]:
    try:
        return data.decode("utf-8-sig"), []
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        return "", [RowProblem(line=line, message="the file is not UTF-8 text; save it as UTF-8")]


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return slug[:128] or "imported"


@dataclass
class _PendingCohort:
    """A cohort being collected from CSV rows, with the lines its name and description came from."""

    name: str
    line: int
    description: str = ""
    description_line: int = 0
    codes: dict[str, None] = field(default_factory=dict)  # ordered set of code keys


def _header(text: str) -> tuple[str, list[str]]:
    """The delimiter (comma, semicolon or tab) under which the header names our columns."""
    first = text.splitlines()[0] if text else ""
    for delimiter in (",", ";", "\t"):
        names = [n.strip().lower() for n in next(csv.reader([first], delimiter=delimiter), [])]
        if all(column in names for column in _REQUIRED_COLUMNS):
            return delimiter, names
    return ",", [n.strip().lower() for n in next(csv.reader([first]), [])]


def _row_problems(
    cohort_id: str,
    cohort_name: str,
    code: str,
    description: str,
    line: int,
    cohorts: dict[str, _PendingCohort],
    folded: dict[str, str],
) -> list[str]:
    found: list[str] = []
    if not cohort_id:
        found.append("empty cohort_id")
    elif not valid_cohort_id(cohort_id):
        found.append(
            f"cohort_id {cohort_id!r} must be printable text of at most 128 characters "
            "(no control characters or surrounding spaces)"
        )
    if not cohort_name:
        found.append("empty cohort_name")
    if not code:
        found.append("empty code")
    else:
        problem = _code_problem(code)
        if problem:
            found.append(problem)
    seen = cohorts.get(cohort_id)
    if seen is not None and cohort_name and seen.name != cohort_name:
        found.append(f"cohort_id {cohort_id!r} is named {cohort_name!r} here but {seen.name!r} on line {seen.line}")
    if seen is not None and description and seen.description not in ("", description):
        found.append(
            f"cohort_id {cohort_id!r} has description {description!r} here but "
            f"{seen.description!r} on line {seen.description_line}"
        )
    other = folded.get(cohort_id.lower())
    if seen is None and other is not None and other != cohort_id:
        found.append(
            f"cohort_id {cohort_id!r} differs from {other!r} (line {cohorts[other].line}) "
            "only in letter case; their files would collide"
        )
    return found


def _unterminated_quote_line(text: str, delimiter: str) -> int | None:
    """The line of a quote that opens a value and is never closed (the csv module reads on to the end)."""
    line, at_field_start, in_quotes, quote_line = 1, True, False, 0
    position = 0
    while position < len(text):
        char = text[position]
        if in_quotes:
            if char == '"':
                if text.startswith('"', position + 1):
                    position += 2
                    continue
                in_quotes = False
            elif char == "\n":
                line += 1
        else:
            if char == '"' and at_field_start:
                in_quotes, quote_line = True, line
            at_field_start = char in (delimiter, "\n", "\r")
            if char == "\n":
                line += 1
        position += 1
    return quote_line if in_quotes else None


def _shared_name_notes(cohorts: dict[str, _PendingCohort], limit: int = 10) -> list[str]:
    """A note per cohort name (letter case aside) that several cohort ids share, naming their first lines.

    Kept, not refused (two versions of one definition may share a name), but a benchmark queries a
    cohort by its name: such cohorts get the same predicted list, and a picker shows the same name twice.
    """
    by_name: dict[str, list[str]] = {}
    for cohort_id, cohort in cohorts.items():
        by_name.setdefault(cohort.name.casefold(), []).append(cohort_id)
    shared = [ids for ids in by_name.values() if len(ids) > 1]
    notes = [
        f"cohort name {cohorts[ids[0]].name!r} is used by {len(ids)} cohorts ("
        + ", ".join(f"{cohort_id!r} on line {cohorts[cohort_id].line}" for cohort_id in ids[:5])
        + (f", and {len(ids) - 5} more" if len(ids) > 5 else "")
        + "): a benchmark queries each by its name, so they get the same predicted list"
        for ids in shared[:limit]
    ]
    if len(shared) > limit:
        notes.append(f"... and {len(shared) - limit} more cohort name(s) used by several cohorts")
    return notes


def _parse_import_csv(text: str) -> tuple[list[SourceCohort], list[str], list[RowProblem]]:
    """Cohorts from the CSV text, warnings, and every row problem found (all of them)."""
    notes: list[str] = []
    if not text.strip():
        return (
            [],
            [],
            [
                RowProblem(
                    line=1, message="the file is empty; expected a header row with columns cohort_id, cohort_name, code"
                )
            ],
        )
    delimiter, names = _header(text)
    missing = [column for column in _REQUIRED_COLUMNS if column not in names]
    if missing:
        return (
            [],
            [],
            [
                RowProblem(
                    line=1,
                    message=f"missing column(s) {', '.join(missing)} in the header (found: "
                    f"{', '.join(repr(n) for n in names) or 'nothing'}); required: "
                    f"{', '.join(_REQUIRED_COLUMNS)}, optional: {', '.join(_OPTIONAL_COLUMNS)}",
                )
            ],
        )
    duplicated = sorted({n for n in names if n and names.count(n) > 1})
    if duplicated:
        return (
            [],
            [],
            [RowProblem(line=1, message=f"column(s) {', '.join(duplicated)} appear more than once in the header")],
        )
    ignored = [n for n in names if n not in _REQUIRED_COLUMNS + _OPTIONAL_COLUMNS]
    if ignored:
        notes.append(f"ignored column(s): {', '.join(repr(n) for n in ignored)}")
    index = {name: position for position, name in enumerate(names)}

    open_quote_line = _unterminated_quote_line(text, delimiter)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    problems: list[RowProblem] = []
    cohorts: dict[str, _PendingCohort] = {}
    folded: dict[str, str] = {}  # lower-cased id -> id, to catch ids that collide as file names
    duplicates = n_rows = 0
    try:
        next(reader)
    except csv.Error as error:
        return [], [], [RowProblem(line=1, message=f"unreadable CSV ({error})")]
    line = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            problems.append(RowProblem(line=line, message=f"unreadable CSV ({error})"))
            break
        start, line = line, reader.line_num + 1
        if open_quote_line is not None and start <= open_quote_line < line:
            # the reader swallowed the rest of the file into one value: name the quote, not its effects
            problems.append(
                RowProblem(
                    line=open_quote_line,
                    message='a quote (") opened on this line is never closed, so everything after it was '
                    "read as one value; close the quote or remove it",
                )
            )
            break
        if not any(value.strip() for value in row):
            continue
        n_rows += 1
        if len(row) > len(names):
            problems.append(
                RowProblem(
                    line=start,
                    message=f"{len(row)} fields but the header has {len(names)} (quote values that "
                    f"contain a {delimiter!r})",
                )
            )
            continue
        values = {
            name: re.sub(r"\s+", " ", row[position]).strip() if position < len(row) else ""
            for name, position in index.items()
        }
        cohort_id, cohort_name = values["cohort_id"], values["cohort_name"]
        code, description = values["code"], values.get("description", "")
        found = _row_problems(cohort_id, cohort_name, code, description, start, cohorts, folded)
        problems.extend(RowProblem(line=start, message=message) for message in found)
        id_ok = valid_cohort_id(cohort_id)
        if id_ok and cohort_name and cohort_id not in cohorts and cohort_id.lower() not in folded:
            cohorts[cohort_id] = _PendingCohort(name=cohort_name, line=start)
            folded[cohort_id.lower()] = cohort_id
        if found:
            continue
        cohort = cohorts[cohort_id]
        if description and not cohort.description:
            cohort.description, cohort.description_line = description, start
        key = code_key(code)
        if key is None:  # pragma: no cover - _code_problem rejected it already
            continue
        if key in cohort.codes:
            duplicates += 1
        cohort.codes[key] = None
    if n_rows == 0 and not problems:
        problems.append(RowProblem(line=2, message="no data rows below the header"))
    if duplicates:
        notes.append(f"{duplicates} repeated (cohort_id, code) row(s) were merged")
    notes += _shared_name_notes(cohorts)
    result = [
        SourceCohort(
            cohort_id=cohort_id,
            cohort_name=cohort.name,
            codes=list(cohort.codes),
            description=cohort.description or None,
        )
        for cohort_id, cohort in cohorts.items()
    ]
    return result, notes, problems


def import_library_csv(
    con: duckdb.DuckDBPyConnection,
    csv_path: Path | str,
    dest: Path | str | None = None,
    library_id: str | None = None,
    name: str | None = None,
    citation: Citation | None = None,
    overwrite: bool = False,
) -> LibraryManifest:
    """Write a library from a CSV of ``cohort_id, cohort_name, code[, description]`` rows.

    Every bad row is reported at once (``CsvImportError``, an ``ImportRowError``) and nothing is
    written; codes not in the vocabulary are kept, counted and warned about, like the bundled
    ones. ``dest`` is the library directory (default ``libraries_dir()/<library_id>``); an
    existing library there is replaced only with ``overwrite``.
    """
    path = Path(csv_path)
    try:
        data = read_user_file(path, MAX_IMPORT_BYTES, "a library CSV")
    except FileNotFoundError:
        raise LibraryError(f"{path}: no such file") from None
    except OSError as error:
        raise LibraryError(f"{path}: cannot be read ({error})") from None
    library_id = library_id.strip() if library_id is not None else _slug(path.stem)
    if not SAFE_ID.match(library_id):
        raise LibraryError(f"library id {library_id!r} may hold only letters, digits, '.', '_' and '-'")
    target = Path(dest) if dest is not None else libraries_dir() / library_id
    check_library_target(target, overwrite, library_id)
    text, problems = _decode(data)
    if problems:
        raise CsvImportError(path, problems)
    cohorts, notes, problems = _parse_import_csv(text)
    if problems:
        raise CsvImportError(path, problems)
    digest = hashlib.sha256(data).hexdigest()
    source = SourceLibrary(
        dir_name=target.name,
        library_id=library_id,
        name=name or path.stem,
        description=(
            f"Imported from {path.name}: {len(cohorts)} cohort(s), "
            f"{sum(len(c.codes) for c in cohorts)} cohort-code pair(s)."
        ),
        citation=citation
        or Citation(
            source=f"user import of {path.name}",
            version=f"sha256:{digest[:12]}",
            licence="as supplied by the user (not recorded)",
        ),
        cohorts=cohorts,
        provenance={"source_files": {path.name: digest}, "imported_from": str(path.resolve())},
        notes=notes,
    )
    manifest, definitions = assemble_library(con, source, now_iso())
    if manifest.stats.n_codes_not_in_vocabulary:
        shown = ", ".join(manifest.stats.codes_not_in_vocabulary[:10])
        more = manifest.stats.n_codes_not_in_vocabulary - 10
        notes.append(
            f"{manifest.stats.n_codes_not_in_vocabulary} code(s) are not in the loaded vocabulary "
            f"and were kept (reported as unresolvable per cohort): {shown}" + (f" and {more} more" if more > 0 else "")
        )
    manifest.report["warnings"] = notes
    for note in notes:
        warnings.warn(f"{path.name}: {note}", LibraryImportWarning, stacklevel=2)
    with libraries_lock(libraries_dir()):
        check_library_target(target, overwrite, library_id)  # again: another import may have finished meanwhile
        write_library(target, manifest, definitions, replace=overwrite)
    return manifest

"""Runs: what a method (built-in, plugged in, or brought as a file) produced for each cohort.

A run maps cohort ids to ranked or unranked codes, each with its provenance. Runs are read from
and written to one CSV shape (``cohort_id, code[, rank, score]``) and one JSON shape, so a
researcher can score an LLM's lists or a colleague's hand-built lists beside the built-in methods.
Validation reports every problem with its line number and accepts nothing partially.
"""

from __future__ import annotations

import csv
import io
import json
import math
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from phenoforge.csv_safe import SafeWriter, unescaped_cell
from phenoforge.errors import PhenoforgeError
from phenoforge.storage import read_user_file

if TYPE_CHECKING:
    from phenoforge.engine.expansion import Hierarchy
    from phenoforge.eval.models import CohortEvalResult
    from phenoforge.eval.qrels import Qrels

RUN_CSV_COLUMNS = ["cohort_id", "code", "rank", "score"]
MAX_PROBLEMS_SHOWN = 20
MAX_RUN_FILE_BYTES = 64 << 20
"""The largest run file ``read_run`` reads (64 MiB: millions of rows); past it, and for a device, it refuses."""


def clean_name(name: str) -> str:
    """``name`` as a reader sees it: NFKC-normalised, format characters (zero-width spaces, bidi marks,
    byte-order marks) dropped, blanks collapsed and trimmed. An imported run is named this, so
    "hybrid\u200b " cannot stand beside "hybrid" as a second row that reads the same."""
    text = "".join(ch for ch in unicodedata.normalize("NFKC", name) if unicodedata.category(ch) != "Cf")
    return " ".join(text.split())


_LOOK_ALIKE_SCRIPTS = {"LATIN", "CYRILLIC", "GREEK"}
"""Scripts with letters drawn alike (Cyrillic 'һ', 'о', Greek 'ο' and Latin 'h', 'o'): NFKC keeps them apart."""


def mixed_script(name: str) -> bool:
    """Whether ``name``'s letters mix Latin, Cyrillic or Greek: how 'һybrid' (a Cyrillic h) passes for
    'hybrid'. One script throughout is a name; a mix of these is a look-alike (Unicode TS #39's
    single-script restriction, for the scripts that share glyphs)."""
    scripts = {unicodedata.name(ch, "").split(" ")[0] for ch in name if ch.isalpha()}
    return len(scripts & _LOOK_ALIKE_SCRIPTS) > 1


def name_key(name: str) -> str:
    """How a run's or method's name reads: NFKC-normalised, format characters (zero-width spaces, bidi
    marks) dropped, blanks collapsed and trimmed, case folded. Two names with one key would make two
    rows a reader cannot tell apart ("hybrid" and "hybrid\u200b ")."""
    return clean_name(name).casefold()


class RunEntry(BaseModel):
    """One code of a run, where it ranked, and why it is there."""

    code: str
    rank: int | None = None
    score: float | None = None
    provenance: list[str] = Field(default_factory=list)


class Run(BaseModel):
    """One method's codes for every cohort it answered."""

    name: str
    cohorts: dict[str, list[RunEntry]] = Field(default_factory=dict)
    source: str = Field(default="", description="'built-in', 'module:function', 'entry point', or the imported file")
    notes: list[str] = Field(default_factory=list)

    def codes(self, cohort_id: str) -> list[str]:
        return [entry.code for entry in self.cohorts.get(cohort_id, [])]


class RunImportError(PhenoforgeError):
    """A run file with problems; ``problems`` are 'line N: what is wrong'."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        shown = "\n  ".join(problems[:MAX_PROBLEMS_SHOWN])
        more = f"\n  ... and {len(problems) - MAX_PROBLEMS_SHOWN} more" if len(problems) > MAX_PROBLEMS_SHOWN else ""
        super().__init__(f"{source}: {len(problems)} problem(s), nothing imported:\n  {shown}{more}")


def _number(text: str, kind: type, what: str) -> tuple[Any, str | None]:
    text = text.strip()
    if not text:
        return None, None
    try:
        value = kind(text)
    except ValueError:
        return None, f"{what} {text!r} is not a {'whole number' if kind is int else 'number'}"
    if kind is float and not math.isfinite(value):
        return None, f"{what} {text!r} is not finite"
    if kind is int and value <= 0:
        return None, f"{what} must be 1 or more, got {value}"
    return value, None


Row = tuple[int, str, str, str, str, list[str] | None]
"""(line or entry number, cohort id, code, rank, score, provenance or None when the file gives none)"""


def _validate(rows: Iterable[Row], qrels: Qrels, hierarchy: Hierarchy, name: str, source: str) -> Run:
    problems: list[str] = []
    cohorts: dict[str, list[RunEntry]] = {}
    seen: set[tuple[str, int]] = set()
    ranked: set[tuple[str, int]] = set()
    shown = clean_name(name)
    if not shown:
        raise RunImportError(source, [f"the run's name {name!r} has no visible characters"])
    if mixed_script(shown):
        raise RunImportError(source, [f"the run's name {shown!r} mixes Latin, Cyrillic or Greek letters"])
    for line, cohort_id, raw_code, raw_rank, raw_score, provenance in rows:
        where = f"line {line}"
        cohort_id = cohort_id.strip()
        if not cohort_id:
            problems.append(f"{where}: empty cohort_id")
            continue
        if cohort_id not in qrels.cohorts:
            problems.append(f"{where}: cohort {cohort_id!r} is not a scorable cohort of library {qrels.library_id!r}")
            continue
        concept_id = hierarchy.resolve(raw_code)
        if concept_id is None:
            problems.append(f"{where}: code {raw_code.strip()!r} is not in the loaded vocabulary")
            continue
        rank, rank_problem = _number(raw_rank, int, "rank")
        score, score_problem = _number(raw_score, float, "score")
        problems += [f"{where}: {p}" for p in (rank_problem, score_problem) if p]
        if rank_problem or score_problem:
            continue
        if (cohort_id, concept_id) in seen:
            continue  # the same code twice for a cohort counts once
        seen.add((cohort_id, concept_id))
        if rank is not None and (cohort_id, rank) in ranked:
            problems.append(f"{where}: rank {rank} is given twice for cohort {cohort_id!r}")
            continue
        ranked.add((cohort_id, rank))
        why = [f"imported: {shown}"] if provenance is None else provenance
        cohorts.setdefault(cohort_id, []).append(
            RunEntry(code=hierarchy.code[concept_id], rank=rank, score=score, provenance=why)
        )
    if problems:
        raise RunImportError(source, problems)
    if not cohorts:
        raise RunImportError(source, ["no rows: a run needs at least one 'cohort_id, code' row"])
    for entries in cohorts.values():
        if any(entry.rank is not None for entry in entries):
            entries.sort(key=lambda entry: (entry.rank is None, entry.rank or 0))
    missing = [cid for cid in qrels.cohorts if cid not in cohorts]
    notes = (
        [
            f"{len(missing)} cohort(s) of the library have no rows in this run: it is scored, and compared, "
            f"on the {len(cohorts)} it answers"
        ]
        if missing
        else []
    )
    return Run(name=shown, cohorts=cohorts, source=source, notes=notes)


def parse_run_csv(text: str, qrels: Qrels, hierarchy: Hierarchy, name: str, source: str = "run.csv") -> Run:
    """A run from CSV text with columns ``cohort_id, code`` and optional ``rank``, ``score``."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [column.strip().lower().lstrip("\ufeff") for column in next(reader)]
    except StopIteration:
        raise RunImportError(source, ["the file is empty"]) from None
    except csv.Error as error:
        raise RunImportError(source, [f"line 1: {error}"]) from None
    missing = [column for column in ("cohort_id", "code") if column not in header]
    if missing:
        raise RunImportError(source, [f"line 1: missing column(s) {', '.join(missing)} (header: {', '.join(header)})"])
    index = {column: header.index(column) for column in [*RUN_CSV_COLUMNS, "provenance"] if column in header}

    def rows() -> Iterable[Row]:
        try:
            for record in reader:
                if not any(cell.strip() for cell in record):
                    continue
                line = reader.line_num

                def cell(column: str, record: list[str] = record) -> str:
                    position = index.get(column)
                    return unescaped_cell(record[position]) if position is not None and position < len(record) else ""

                why = _provenance(cell("provenance")) if "provenance" in index else None
                yield line, cell("cohort_id"), cell("code"), cell("rank"), cell("score"), why
        except csv.Error as error:
            raise RunImportError(source, [f"line {reader.line_num}: {error}"]) from None

    return _validate(rows(), qrels, hierarchy, name, source)


class _JsonRun(BaseModel):
    name: str | None = None
    cohorts: dict[str, list[RunEntry | str]]


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a key given twice (``json`` would keep the last)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(f"key {key!r} is given twice in one JSON object: nothing is kept silently")
        found[key] = value
    return found


def parse_run_json(text: str, qrels: Qrels, hierarchy: Hierarchy, name: str, source: str = "run.json") -> Run:
    """A run from JSON: ``{"cohorts": {cohort_id: ["E11.9", ...] or [{"code", "rank", "score", "provenance"}]}}``.

    Problems are reported as ``cohort X, entry N`` (JSON has no useful line numbers per entry). A key
    given twice in one object (a cohort listed twice) is refused, not resolved to its last value.
    """
    try:
        raw = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as error:
        raise RunImportError(source, [str(error)]) from None
    except RecursionError:
        raise RunImportError(source, ["the JSON is nested too deeply to be a run"]) from None
    except json.JSONDecodeError as error:
        raise RunImportError(source, [f"line {error.lineno}: not valid JSON ({error.msg})"]) from None
    try:
        payload = _JsonRun.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise RunImportError(source, [f"{where}: {first['msg']} (expected {{'cohorts': {{id: [codes]}}}})"]) from None
    rows: list[Row] = []
    for cohort_id, entries in payload.cohorts.items():
        for position, entry in enumerate(entries, start=1):
            if isinstance(entry, str):
                rows.append((position, cohort_id, entry, "", "", None))
            else:
                rank = "" if entry.rank is None else str(entry.rank)
                score = "" if entry.score is None else repr(entry.score)
                why = list(entry.provenance) if "provenance" in entry.model_fields_set else None
                rows.append((position, cohort_id, entry.code, rank, score, why))
    try:
        return _validate(rows, qrels, hierarchy, payload.name or name, source)
    except RunImportError as error:
        # JSON entries are numbered within their cohort
        raise RunImportError(source, [p.replace("line ", "entry ", 1) for p in error.problems]) from None


def read_run(path: Path | str, qrels: Qrels, hierarchy: Hierarchy, name: str | None = None) -> Run:
    """A run file (``.json`` or CSV), validated against ``qrels`` and the vocabulary."""
    path = Path(path)
    try:
        text = read_user_file(path, MAX_RUN_FILE_BYTES, "a run file").decode("utf-8-sig")
    except FileNotFoundError:
        raise PhenoforgeError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PhenoforgeError(f"{path}: is a directory, not a run file") from None
    except OSError as error:
        raise PhenoforgeError(f"{path}: cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise RunImportError(str(path), ["the file is not UTF-8 text"]) from None
    name = name or path.stem
    if path.suffix.lower() == ".json":
        return parse_run_json(text, qrels, hierarchy, name, str(path))
    return parse_run_csv(text, qrels, hierarchy, name, str(path))


def _provenance(cell: str) -> list[str] | None:
    """A provenance cell as written by :func:`run_to_csv`: a JSON list, or one line of text (None: empty)."""
    if not cell.strip():
        return None
    if cell.startswith("["):
        try:
            items = json.loads(cell)
        except json.JSONDecodeError:
            return [cell]
        if isinstance(items, list) and all(isinstance(item, str) for item in items):
            return items
    return [cell]


def _provenance_cell(provenance: list[str]) -> str:
    """One line of text when that reads back the same, else a JSON list (several lines, or none)."""
    if len(provenance) == 1 and provenance[0].strip() and not provenance[0].startswith("["):
        return provenance[0]
    return json.dumps(provenance, ensure_ascii=False)


def run_to_csv(run: Run) -> str:
    """The run in the import CSV shape, one row per code, that reads back as the same run: ranks as given
    (empty when unranked), scores to every digit, and each code's provenance in a last column."""
    buffer = io.StringIO()
    writer = SafeWriter(buffer, lineterminator="\n")
    writer.writerow([*RUN_CSV_COLUMNS, "provenance"])
    for cohort_id, entries in run.cohorts.items():
        for entry in entries:
            rank = "" if entry.rank is None else entry.rank
            score = "" if entry.score is None else repr(entry.score)
            writer.writerow([cohort_id, entry.code, rank, score, _provenance_cell(entry.provenance)])
    return buffer.getvalue()


def run_to_json(run: Run) -> str:
    """The run in the import JSON shape (reads back as the same run)."""
    payload = {
        "name": run.name,
        "cohorts": {
            cohort_id: [entry.model_dump(exclude_none=True) for entry in entries]
            for cohort_id, entries in run.cohorts.items()
        },
    }
    return json.dumps(payload, indent=1)


def run_from_results(results: Iterable[CohortEvalResult], method: str) -> Run:
    """``method``'s run as a saved report recorded it: each cohort's codes with their ranks, scores and
    provenance (a report saved before ranks were recorded: ranks by position)."""
    cohorts: dict[str, list[RunEntry]] = {}
    for result in results:
        if result.method != method:
            continue
        recorded = bool(result.ranks)
        cohorts[result.cohort_id] = [
            RunEntry(
                code=code,
                rank=result.ranks.get(code) if recorded else position,
                score=result.code_scores.get(code),
                provenance=list(result.provenance.get(code, [])),
            )
            for position, code in enumerate(result.predicted_codes, start=1)
        ]
    return Run(name=method, cohorts=cohorts)

"""Load a user's Athena (OMOP CDM v5) vocabulary download into phenoforge's one schema.

Athena files are tab-delimited despite their ``.csv`` names, unquoted (concept names contain
``"``), and large: CONCEPT_RELATIONSHIP and CONCEPT_ANCESTOR run to tens of millions of rows. So
nothing here reads a table into Python: DuckDB's CSV reader streams each file straight into SQL
that keeps only what phenoforge needs (valid ICD10CM and SNOMED concepts, ICD-10-CM 'Is a' and
'Maps to' edges, SNOMED ancestry). The database is written to a temporary file and renamed into
place, so a failed load never replaces a working vocabulary.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, Field

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.schema import ICD10CM, INDEXES
from phenoforge.engine.vocab_build import create_schema, write_metadata
from phenoforge.errors import VocabularyError
from phenoforge.storage import remove_stale_temporaries

SNOMED = "SNOMED"
LOADED_VOCABULARIES: tuple[str, ...] = (ICD10CM, SNOMED)

# Column name -> DuckDB type, in OMOP CDM v5 order. Dates stay text: Athena writes 20240830,
# other exports 2024-08-30, and only the release date is ever read from them.
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "CONCEPT": {
        "concept_id": "BIGINT",
        "concept_name": "VARCHAR",
        "domain_id": "VARCHAR",
        "vocabulary_id": "VARCHAR",
        "concept_class_id": "VARCHAR",
        "standard_concept": "VARCHAR",
        "concept_code": "VARCHAR",
        "valid_start_date": "VARCHAR",
        "valid_end_date": "VARCHAR",
        "invalid_reason": "VARCHAR",
    },
    "CONCEPT_RELATIONSHIP": {
        "concept_id_1": "BIGINT",
        "concept_id_2": "BIGINT",
        "relationship_id": "VARCHAR",
        "valid_start_date": "VARCHAR",
        "valid_end_date": "VARCHAR",
        "invalid_reason": "VARCHAR",
    },
    "CONCEPT_ANCESTOR": {
        "ancestor_concept_id": "BIGINT",
        "descendant_concept_id": "BIGINT",
        "min_levels_of_separation": "INTEGER",
        "max_levels_of_separation": "INTEGER",
    },
    "VOCABULARY": {
        "vocabulary_id": "VARCHAR",
        "vocabulary_name": "VARCHAR",
        "vocabulary_reference": "VARCHAR",
        "vocabulary_version": "VARCHAR",
        "vocabulary_concept_id": "BIGINT",
    },
}
# Only these columns must be present; the others are read when there and ignored otherwise.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "CONCEPT": (
        "concept_id",
        "concept_name",
        "domain_id",
        "vocabulary_id",
        "concept_class_id",
        "standard_concept",
        "concept_code",
        "valid_start_date",
        "invalid_reason",
    ),
    "CONCEPT_RELATIONSHIP": ("concept_id_1", "concept_id_2", "relationship_id", "invalid_reason"),
    "CONCEPT_ANCESTOR": (
        "ancestor_concept_id",
        "descendant_concept_id",
        "min_levels_of_separation",
        "max_levels_of_separation",
    ),
    "VOCABULARY": ("vocabulary_id", "vocabulary_version"),
}
REQUIRED_TABLES: tuple[str, ...] = ("CONCEPT", "CONCEPT_RELATIONSHIP", "CONCEPT_ANCESTOR")
OPTIONAL_TABLES: tuple[str, ...] = ("VOCABULARY",)

DEFAULT_MEMORY_LIMIT = "1GB"
MEMORY_LIMIT_ENV = "PHENOFORGE_ATHENA_MEMORY_LIMIT"
_HEADER_LIMIT = 65536
_ROMAN = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}

# ICD-10-CM node kind from Athena's concept_class_id ('3-char billing code', '4-char nonbill
# code', ..., '7-char billing code'), falling back on the shape of the code for hierarchy classes
# ('ICD10 Hierarchy', chapters, sub-chapters): a range (A00-A09) is a block, a number or roman
# numeral a chapter. Seven-character codes are nearly all 7th-character extensions (51,305 of
# 51,485 in the FY2026 release), so that class maps to 'extension'.
_KEY_SQL = "upper(replace(regexp_replace(coalesce(concept_code, ''), '\\s', '', 'g'), '.', ''))"
_KIND_SQL = f"""
    CASE
        WHEN regexp_matches(coalesce(concept_class_id, ''), '^3-char') THEN 'category'
        WHEN regexp_matches(coalesce(concept_class_id, ''), '^[456]-char') THEN 'subcategory'
        WHEN regexp_matches(coalesce(concept_class_id, ''), '^7-char') THEN 'extension'
        WHEN contains({_KEY_SQL}, '-') THEN 'block'
        WHEN regexp_matches({_KEY_SQL}, '^([0-9]+|[IVXLC]+)$') THEN 'chapter'
        WHEN length({_KEY_SQL}) = 3 THEN 'category'
        WHEN length({_KEY_SQL}) = 7 THEN 'extension'
        ELSE 'subcategory'
    END
"""
_BILLABLE_SQL = (
    "(coalesce(concept_class_id, '') ILIKE '%billing%' AND coalesce(concept_class_id, '') NOT ILIKE '%nonbill%')"
)


class AthenaLoadReport(BaseModel):
    """What a load put into the database, for the CLI and the dashboard to show."""

    athena_dir: str
    db_path: str
    vocabulary_release: str
    build_id: str
    n_concept_rows_considered: int = Field(description="ICD10CM and SNOMED rows in CONCEPT")
    n_invalid_skipped: int = Field(description="of those, rows with an invalid_reason (D, U)")
    n_icd10cm_concepts: int
    n_snomed_concepts: int
    n_billable: int
    counts_by_kind: dict[str, int]
    n_is_a_edges: int = Field(description="ICD-10-CM child 'Is a' parent edges")
    n_icd10cm_roots: int = Field(description="ICD-10-CM concepts without a parent")
    n_maps_to: int = Field(description="ICD10CM 'Maps to' standard-concept edges kept")
    n_maps_to_dropped: int = Field(description="'Maps to' edges whose target is not loaded")
    n_mapped_icd10cm: int = Field(description="ICD-10-CM codes with at least one 'Maps to' edge")
    n_ancestor_rows: int = Field(description="SNOMED CONCEPT_ANCESTOR rows kept")
    seconds: float
    warnings: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        """A few lines for the terminal."""
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(self.counts_by_kind.items()))
        lines = [
            f"Loaded Athena vocabulary from {self.athena_dir} into {self.db_path} in {self.seconds:.1f} s",
            f"  release: {self.vocabulary_release}",
            f"  ICD-10-CM concepts: {self.n_icd10cm_concepts:,} ({kinds}); billable {self.n_billable:,}",
            f"  SNOMED concepts: {self.n_snomed_concepts:,}; ancestor rows: {self.n_ancestor_rows:,}",
            f"  ICD-10-CM 'Is a' edges: {self.n_is_a_edges:,} (roots without a parent: {self.n_icd10cm_roots:,})",
            f"  ICD10CM 'Maps to' edges: {self.n_maps_to:,} from {self.n_mapped_icd10cm:,} codes "
            f"({self.n_maps_to_dropped:,} dropped: target not a loaded concept)",
            f"  skipped invalid ICD10CM/SNOMED rows: {self.n_invalid_skipped:,} of {self.n_concept_rows_considered:,}",
        ]
        lines += [f"  warning: {warning}" for warning in self.warnings]
        return "\n".join(lines)


def find_table_file(athena_dir: Path, table: str) -> Path | None:
    """``CONCEPT.csv`` in ``athena_dir``, matched case-insensitively (``.csv``, ``.tsv``, ``.txt``)."""
    wanted = {f"{table}.{ext}".lower() for ext in ("csv", "tsv", "txt")}
    matches = sorted(child for child in athena_dir.iterdir() if child.is_file() and child.name.lower() in wanted)
    return matches[0] if matches else None


def read_header(path: Path, table: str) -> list[str]:
    """The header's column names (lower case), or a VocabularyError saying what is wrong.

    Only the first line is read, so a wrong delimiter or a missing column is caught before a
    multi-gigabyte file is streamed.
    """
    try:
        with path.open("r", encoding="utf-8-sig", newline="") as handle:
            line = handle.readline(_HEADER_LIMIT)
    except UnicodeDecodeError:
        raise VocabularyError(f"{path}: not UTF-8 text; is this an Athena {table} file?") from None
    except OSError as error:
        raise VocabularyError(f"{path}: cannot be read ({error.strerror})") from None
    line = line.rstrip("\r\n")
    if not line.strip():
        raise VocabularyError(f"{path}: empty file, expected a header row of {table} columns")
    if "\t" not in line:
        delimiter = next((d for d in (",", ";", "|") if d in line), None)
        hint = f"it looks {delimiter!r}-delimited" if delimiter else "its header has one column"
        raise VocabularyError(
            f"{path}: Athena files are tab-delimited, but {hint}; use the files exactly as "
            "Athena's download unpacks them"
        )
    columns = [name.strip().lower() for name in line.split("\t")]
    missing = [name for name in REQUIRED_COLUMNS[table] if name not in columns]
    if missing:
        raise VocabularyError(
            f"{path}: missing column(s) {', '.join(missing)} in the header; an OMOP CDM v5 "
            f"{table} table needs {', '.join(REQUIRED_COLUMNS[table])}"
        )
    duplicates = sorted({name for name in columns if columns.count(name) > 1})
    if duplicates:
        raise VocabularyError(f"{path}: duplicate column(s) {', '.join(duplicates)} in the header")
    return columns


def column_types(table: str, header: list[str]) -> dict[str, str]:
    """The ``columns`` argument for read_csv: known names typed, unknown ones kept as text."""
    known = TABLE_COLUMNS[table]
    return {
        (name if name in known else f"extra_{index}"): known.get(name, "VARCHAR") for index, name in enumerate(header)
    }


def _reader(alias: str) -> str:
    """A read_csv call over the path and column types given as the two next parameters."""
    return (
        "read_csv(?, delim = '\t', header = true, quote = '', escape = '', comment = '', "
        f"auto_detect = false, strict_mode = true, null_padding = false, columns = ?) AS {alias}"
    )


def _malformed(path: Path, error: duckdb.Error) -> VocabularyError:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = "; ".join(lines[:3])[:400]
    return VocabularyError(f"{path}: malformed Athena file ({detail}); re-download or re-extract it from Athena")


def _cannot_write(path: Path, error: duckdb.Error) -> VocabularyError:
    first = str(error).splitlines()[0][:200]
    return VocabularyError(
        f"{path}: could not write the new database ({first}); check free disk space and permissions there"
    )


def _out_of_memory(path: Path, memory_limit: str, error: duckdb.Error, doing: str = "loading it") -> VocabularyError:
    first = str(error).splitlines()[0][:200]
    return VocabularyError(
        f"{path}: ran out of memory {doing} with memory_limit={memory_limit} ({first}); "
        f"allow more (e.g. {MEMORY_LIMIT_ENV}=2GB) or free memory and retry"
    )


def _roman_to_int(text: str) -> int | None:
    if not text or any(ch not in _ROMAN for ch in text):
        return None
    total = 0
    for index, ch in enumerate(text):
        value = _ROMAN[ch]
        following = _ROMAN[text[index + 1]] if index + 1 < len(text) else 0
        total += -value if value < following else value
    return total


def _iso_date(text: str | None) -> str | None:
    if not text:
        return None
    text = text.strip()
    if re.fullmatch(r"\d{8}", text):
        return f"{text[:4]}-{text[4:6]}-{text[6:]}"
    return text


def _scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> int:
    return int(con.execute(sql, params or []).fetchall()[0][0] or 0)


def _stage_concepts(con: duckdb.DuckDBPyConnection, path: Path, types: dict[str, str]) -> dict[str, Any]:
    con.execute(
        "CREATE TEMP TABLE athena_concept AS SELECT concept_id, concept_name, domain_id, "
        "vocabulary_id, concept_class_id, standard_concept, concept_code, valid_start_date, "
        f"invalid_reason FROM {_reader('c')} WHERE vocabulary_id IN (?, ?)",
        [str(path), types, *LOADED_VOCABULARIES],
    )
    con.execute(
        "INSERT INTO concept SELECT concept_id, vocabulary_id, "
        "CASE WHEN vocabulary_id = ? THEN "
        f"  CASE WHEN contains({_KEY_SQL}, '-') OR length({_KEY_SQL}) <= 3 THEN {_KEY_SQL} "
        f"  ELSE substr({_KEY_SQL}, 1, 3) || '.' || substr({_KEY_SQL}, 4) END "
        "ELSE coalesce(concept_code, '') END, "
        f"{_KEY_SQL}, coalesce(concept_name, ''), "
        f"CASE WHEN vocabulary_id = ? THEN {_KIND_SQL} ELSE coalesce(concept_class_id, '') END, "
        f"vocabulary_id = ? AND {_BILLABLE_SQL}, "
        "nullif(standard_concept, ''), domain_id, NULL "
        "FROM athena_concept WHERE coalesce(invalid_reason, '') = '' "
        "QUALIFY row_number() OVER (PARTITION BY concept_id) = 1",
        [ICD10CM, ICD10CM, ICD10CM],
    )
    considered, invalid, latest = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE coalesce(invalid_reason, '') <> ''), "
        "max(valid_start_date) FILTER (WHERE coalesce(invalid_reason, '') = '') "
        "FROM athena_concept"
    ).fetchall()[0]
    con.execute("DROP TABLE athena_concept")  # free its memory before the big files stream
    return {"considered": int(considered), "invalid": int(invalid), "latest": latest}


def _renumber_chapters(con: duckdb.DuckDBPyConnection) -> None:
    """Chapters as ``1``..``22`` (the design's display form), whatever numerals Athena used."""
    rows = con.execute(
        "SELECT concept_id, code FROM concept WHERE vocabulary_id = ? AND kind = 'chapter'",
        [ICD10CM],
    ).fetchall()
    for concept_id, code in rows:
        number = _roman_to_int(code)
        if number is not None:
            con.execute(
                "UPDATE concept SET code = ?, code_key = ? WHERE concept_id = ?",
                [str(number), str(number), concept_id],
            )


def _load_relationships(con: duckdb.DuckDBPyConnection, path: Path, types: dict[str, str]) -> dict[str, Any]:
    # One streamed pass keeps only valid 'Is a' / 'Maps to' edges out of loaded ICD-10-CM codes
    # (a few hundred thousand of the tens of millions of rows).
    con.execute(
        "CREATE TEMP TABLE athena_rel AS SELECT r.concept_id_1, r.concept_id_2, r.relationship_id "
        f"FROM {_reader('r')} "
        "WHERE r.relationship_id IN ('Is a', 'Maps to') AND coalesce(r.invalid_reason, '') = '' "
        "AND r.concept_id_1 IN (SELECT concept_id FROM concept WHERE vocabulary_id = ?)",
        [str(path), types, ICD10CM],
    )
    con.execute(
        "INSERT INTO concept_parent SELECT DISTINCT r.concept_id_1, r.concept_id_2 "
        "FROM athena_rel r JOIN concept p ON p.concept_id = r.concept_id_2 "
        "WHERE r.relationship_id = 'Is a' AND p.vocabulary_id = ? "
        "AND r.concept_id_1 <> r.concept_id_2",
        [ICD10CM],
    )
    con.execute(
        "INSERT INTO concept_map SELECT DISTINCT r.concept_id_1, r.concept_id_2 "
        "FROM athena_rel r JOIN concept t ON t.concept_id = r.concept_id_2 "
        "WHERE r.relationship_id = 'Maps to' AND t.vocabulary_id <> ?",
        [ICD10CM],
    )
    # A parentless range whose children include ranges is a chapter, not a block.
    con.execute(
        "UPDATE concept SET kind = 'chapter' WHERE vocabulary_id = ? AND kind = 'block' "
        "AND concept_id NOT IN (SELECT child_id FROM concept_parent) "
        "AND concept_id IN (SELECT p.parent_id FROM concept_parent p "
        "  JOIN concept c ON c.concept_id = p.child_id WHERE c.kind = 'block')",
        [ICD10CM],
    )
    maps_total = _scalar(
        con, "SELECT count(DISTINCT (concept_id_1, concept_id_2)) FROM athena_rel WHERE relationship_id = 'Maps to'"
    )
    con.execute("DROP TABLE athena_rel")
    return {"maps_total": maps_total}


def _load_ancestors(con: duckdb.DuckDBPyConnection, path: Path, types: dict[str, str]) -> dict[str, Any]:
    con.execute(
        "INSERT INTO concept_ancestor SELECT a.ancestor_concept_id, a.descendant_concept_id, "
        "coalesce(a.min_levels_of_separation, 0), coalesce(a.max_levels_of_separation, 0) "
        f"FROM {_reader('a')} "
        "WHERE a.ancestor_concept_id IN (SELECT concept_id FROM concept WHERE vocabulary_id = ?) "
        "AND a.descendant_concept_id IN (SELECT concept_id FROM concept WHERE vocabulary_id = ?)",
        [str(path), types, SNOMED, SNOMED],
    )
    return {}


def _vocabulary_release(
    con: duckdb.DuckDBPyConnection,
    vocabulary_file: Path | None,
    types: dict[str, str] | None,
    latest: str | None,
) -> tuple[str, dict[str, str]]:
    """A release label from VOCABULARY (Athena's 'None' row carries the download's version)."""
    versions: dict[str, str] = {}
    if vocabulary_file is not None and types is not None:
        try:
            rows = con.execute(
                f"SELECT v.vocabulary_id, v.vocabulary_version FROM {_reader('v')} "
                "WHERE v.vocabulary_id IN ('None', ?, ?)",
                [str(vocabulary_file), types, *LOADED_VOCABULARIES],
            ).fetchall()
        except duckdb.Error as error:
            raise _malformed(vocabulary_file, error) from None
        versions = {str(vid): str(version) for vid, version in rows if version}
    extra = {
        f"athena_{vid.lower()}_version": version for vid, version in versions.items() if vid in LOADED_VOCABULARIES
    }
    parts = [
        versions[vid] if versions[vid].startswith(vid) else f"{vid} {versions[vid]}"
        for vid in LOADED_VOCABULARIES
        if vid in versions
    ]
    if "None" in versions:
        label = f"Athena {versions['None']}"
        return (f"{label} ({'; '.join(parts)})" if parts else label), extra
    if parts:
        return f"Athena ({'; '.join(parts)})", extra
    date = _iso_date(latest)
    return (
        f"Athena download (concepts valid from {date} at the latest)" if date else "Athena download (release unknown)"
    ), extra


def _table_files(athena_dir: Path) -> dict[str, tuple[Path, dict[str, str]]]:
    """Every table file located and its header checked, before any streaming starts."""
    if not athena_dir.is_dir():
        raise VocabularyError(
            f"{athena_dir}: not a directory; pass the folder Athena's download unpacks to "
            "(it holds CONCEPT.csv, CONCEPT_RELATIONSHIP.csv, CONCEPT_ANCESTOR.csv, ...)"
        )
    found: dict[str, tuple[Path, dict[str, str]]] = {}
    missing = []
    for table in REQUIRED_TABLES + OPTIONAL_TABLES:
        path = find_table_file(athena_dir, table)
        if path is None:
            if table in REQUIRED_TABLES:
                missing.append(f"{table}.csv")
            continue
        found[table] = (path, column_types(table, read_header(path, table)))
    if missing:
        raise VocabularyError(
            f"{athena_dir}: missing {', '.join(missing)}; download the ICD10CM and SNOMED "
            "vocabularies from https://athena.ohdsi.org and unpack the whole archive there"
        )
    return found


def load_athena(
    athena_dir: Path,
    db_path: Path,
    progress: ProgressCallback | None = None,
    memory_limit: str | None = None,
    threads: int | None = None,
) -> AthenaLoadReport:
    """Load an Athena download into a new vocabulary database at ``db_path`` (atomically).

    ``memory_limit`` caps DuckDB's working memory (default ``$PHENOFORGE_ATHENA_MEMORY_LIMIT`` or
    1GB; it spills to a temporary directory beside the database beyond it). Peak RSS stays near
    the limit plus a few hundred MB whatever the file sizes: bench/bench_athena_load.py.
    """
    progress = progress or no_progress
    memory_limit = memory_limit or os.environ.get(MEMORY_LIMIT_ENV) or DEFAULT_MEMORY_LIMIT
    started = time.perf_counter()
    athena_dir = Path(athena_dir).expanduser()
    db_path = Path(db_path).expanduser()
    files = _table_files(athena_dir)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(db_path.parent)  # what a killed load or build left behind
    tag = f"{os.getpid()}.{uuid.uuid4().hex[:8]}"
    tmp = db_path.with_name(f".{db_path.name}.{tag}.tmp")
    spill = db_path.with_name(f".{db_path.name}.{tag}.spill")
    total_steps = 5
    try:
        con = duckdb.connect(str(tmp))
        try:
            try:
                con.execute("SET memory_limit = ?", [memory_limit])
            except duckdb.Error:
                raise VocabularyError(
                    f"memory limit {memory_limit!r} is not a size like 512MB or 2GB (check {MEMORY_LIMIT_ENV})"
                ) from None
            con.execute("SET temp_directory = ?", [str(spill)])
            con.execute("SET preserve_insertion_order = false")
            if threads:
                con.execute("SET threads = ?", [int(threads)])
            create_schema(con)
            steps = (
                ("CONCEPT", "reading CONCEPT", _stage_concepts),
                ("CONCEPT_RELATIONSHIP", "reading CONCEPT_RELATIONSHIP", _load_relationships),
                ("CONCEPT_ANCESTOR", "reading CONCEPT_ANCESTOR", _load_ancestors),
            )
            stats: dict[str, Any] = {}
            for step, (table, message, load) in enumerate(steps):
                progress(step, total_steps, message)
                path, types = files[table]
                try:
                    stats |= load(con, path, types)
                except duckdb.OutOfMemoryException as error:
                    raise _out_of_memory(path, memory_limit, error) from None
                except duckdb.IOException as error:
                    raise _cannot_write(tmp, error) from None
                except duckdb.Error as error:
                    raise _malformed(path, error) from None
                if table == "CONCEPT":
                    _check_concepts(con, path)
                    _renumber_chapters(con)
            progress(3, total_steps, "indexing")
            vocabulary = files.get("VOCABULARY")
            release, extra = _vocabulary_release(
                con,
                vocabulary[0] if vocabulary else None,
                vocabulary[1] if vocabulary else None,
                stats.get("latest"),
            )
            write_metadata(
                con,
                {
                    "source": "athena",
                    "source_version": release,
                    "vocabulary_release": release,
                    "athena_dir": str(athena_dir.resolve()),
                    **extra,
                },
            )
            try:
                for statement in INDEXES:
                    con.execute(statement)
                report = _report(con, athena_dir, db_path, release, started, stats)
                con.execute("CHECKPOINT")
            except duckdb.OutOfMemoryException as error:
                raise _out_of_memory(athena_dir, memory_limit, error, "indexing") from None
            except duckdb.IOException as error:
                raise _cannot_write(tmp, error) from None
        finally:
            con.close()
        os.replace(tmp, db_path)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
        _remove_tree(spill)
    progress(total_steps, total_steps, "done")
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _check_concepts(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    n_icd = _scalar(con, "SELECT count(*) FROM concept WHERE vocabulary_id = ?", [ICD10CM])
    if n_icd == 0:
        raise VocabularyError(
            f"{path}: no valid ICD10CM concepts; select the ICD10CM vocabulary (and SNOMED) when "
            "you download from https://athena.ohdsi.org"
        )


def _report(
    con: duckdb.DuckDBPyConnection,
    athena_dir: Path,
    db_path: Path,
    release: str,
    started: float,
    stats: dict[str, Any],
) -> AthenaLoadReport:
    counts = dict(
        con.execute("SELECT kind, count(*) FROM concept WHERE vocabulary_id = ? GROUP BY kind", [ICD10CM]).fetchall()
    )
    n_snomed = _scalar(con, "SELECT count(*) FROM concept WHERE vocabulary_id = ?", [SNOMED])
    n_maps = _scalar(con, "SELECT count(*) FROM concept_map")
    warnings = []
    if n_snomed == 0:
        warnings.append(
            "no valid SNOMED concepts: OHDSI cohorts (SNOMED concept sets) cannot be mapped to "
            "ICD-10-CM; add SNOMED to the Athena download"
        )
    if n_maps == 0:
        warnings.append("no ICD10CM 'Maps to' edges: standard concepts cannot be mapped")
    return AthenaLoadReport(
        athena_dir=str(athena_dir),
        db_path=str(db_path),
        vocabulary_release=release,
        build_id=str(con.execute("SELECT value FROM metadata WHERE key = 'build_id'").fetchall()[0][0]),
        n_concept_rows_considered=stats["considered"],
        n_invalid_skipped=stats["invalid"],
        n_icd10cm_concepts=int(sum(counts.values())),
        n_snomed_concepts=n_snomed,
        n_billable=_scalar(con, "SELECT count(*) FROM concept WHERE vocabulary_id = ? AND billable", [ICD10CM]),
        counts_by_kind={str(kind): int(n) for kind, n in counts.items()},
        n_is_a_edges=_scalar(con, "SELECT count(*) FROM concept_parent"),
        n_icd10cm_roots=_scalar(
            con,
            "SELECT count(*) FROM concept WHERE vocabulary_id = ? "
            "AND concept_id NOT IN (SELECT child_id FROM concept_parent)",
            [ICD10CM],
        ),
        n_maps_to=n_maps,
        n_maps_to_dropped=stats["maps_total"] - n_maps,
        n_mapped_icd10cm=_scalar(con, "SELECT count(DISTINCT source_id) FROM concept_map"),
        n_ancestor_rows=_scalar(con, "SELECT count(*) FROM concept_ancestor"),
        seconds=round(time.perf_counter() - started, 3),
        warnings=warnings,
    )


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)

"""Build ``vocab.duckdb`` from the ICD-10-CM release that simple-icd-10-cm ships.

The build writes a temporary file next to the target and renames it into place, so an interrupted
build never leaves a half-built database where readers look for one.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.codes import code_key
from phenoforge.engine.schema import DDL, ICD10CM, INDEXES, SCHEMA_VERSION
from phenoforge.storage import disk_full_error, is_disk_full, remove_stale_temporaries, temporary_sibling

ICD_PACKAGE = "simple-icd-10-cm"
ICD_PACKAGE_VERSION = "1.5.0"
ICD_RELEASE = "ICD-10-CM FY2026 (April 2026)"

_NOTE_GETTERS: tuple[tuple[str, str], ...] = (
    ("inclusion_term", "get_inclusion_term"),
    ("includes", "get_includes"),
    ("notes", "get_notes"),
    ("excludes1", "get_excludes1"),
    ("excludes2", "get_excludes2"),
    ("use_additional_code", "get_use_additional_code"),
    ("code_first", "get_code_first"),
    ("code_also", "get_code_also"),
    ("seven_chr_note", "get_seven_chr_note"),
)


@dataclass
class VocabularyRows:
    """Everything a vocabulary database holds, as plain rows (also how test fixtures are built)."""

    concepts: list[tuple] = field(default_factory=list)
    """(concept_id, vocabulary_id, code, code_key, name, kind, billable, standard, domain,
    invalid_reason)"""
    parents: list[tuple[int, int]] = field(default_factory=list)
    notes: list[tuple[int, str, str]] = field(default_factory=list)
    ancestors: list[tuple[int, int, int, int]] = field(default_factory=list)
    maps: list[tuple[int, int]] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


def _as_texts(value: object) -> list[str]:
    if not value:
        return []
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    if isinstance(value, dict):
        return [f"{key}: {text}" for key, text in value.items()]
    items = value if isinstance(value, Iterable) else [value]
    return [str(item).strip() for item in items if str(item).strip()]


def icd10cm_rows(progress: ProgressCallback = no_progress) -> VocabularyRows:
    """Read every node of the packaged ICD-10-CM tree (chapters, blocks, codes, 7th characters)."""
    import simple_icd_10_cm as icd

    codes = list(dict.fromkeys(icd.get_all_codes(True)))  # the package repeats some block names
    ids = {code: index + 1 for index, code in enumerate(codes)}
    rows = VocabularyRows()
    total = len(codes)
    for index, code in enumerate(codes):
        # 39 codes (B20, F99, ...) name both a one-category block and its category; they are one
        # node here, a category whose parent is the block's parent.
        if icd.is_chapter(code):
            kind = "chapter"
        elif icd.is_category(code):
            kind = "category"
        elif icd.is_block(code):
            kind = "block"
        elif icd.is_subcategory(code, include_extended_subcategories=False):
            kind = "subcategory"
        else:
            kind = "extension"
        billable = icd.is_leaf(code) and kind in ("category", "subcategory", "extension")
        key = code_key(code) or code
        rows.concepts.append(
            (ids[code], ICD10CM, code, key, icd.get_description(code), kind, billable, None, None, None)
        )
        parent = next((node for node in icd.get_ancestors(code) if node != code), None)
        if parent:
            rows.parents.append((ids[code], ids[parent]))
        for note_type, getter in _NOTE_GETTERS:
            for text in _as_texts(getattr(icd, getter)(code)):
                rows.notes.append((ids[code], note_type, text))
        if index % 5000 == 0:
            progress(index, total, "reading ICD-10-CM")
    progress(total, total, "reading ICD-10-CM")
    rows.metadata = {
        "source": ICD_PACKAGE,
        "source_version": ICD_PACKAGE_VERSION,
        "vocabulary_release": ICD_RELEASE,
    }
    return rows


def write_vocabulary(path: Path, rows: VocabularyRows) -> Path:
    """Write ``rows`` to a new database at ``path`` atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)  # what a killed build left behind
    tmp = temporary_sibling(path, "tmp")
    try:
        try:
            con = duckdb.connect(str(tmp))
            try:
                create_schema(con)
                _insert(con, "concept", rows.concepts, 10)
                _insert(con, "concept_parent", rows.parents, 2)
                _insert(con, "concept_note", rows.notes, 3)
                _insert(con, "concept_ancestor", rows.ancestors, 4)
                _insert(con, "concept_map", rows.maps, 2)
                write_metadata(con, rows.metadata)
                for statement in INDEXES:
                    con.execute(statement)
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.replace(tmp, path)
        except (OSError, duckdb.Error) as error:
            if not is_disk_full(error):
                raise
            kept = "the previous vocabulary is kept as it was" if path.exists() else "nothing was written"
            raise disk_full_error("the vocabulary database", path, kept) from None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
    return path


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    for statement in DDL:
        con.execute(statement)


def write_metadata(con: duckdb.DuckDBPyConnection, extra: dict[str, str]) -> None:
    """Record schema version, build time and a fresh build id beside ``extra``."""
    metadata = {
        "schema_version": SCHEMA_VERSION,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "build_id": uuid.uuid4().hex,
        **extra,
    }
    con.executemany("INSERT OR REPLACE INTO metadata VALUES (?, ?)", list(metadata.items()))


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[tuple], width: int) -> None:
    if not rows:
        return
    import pandas as pd

    frame = pd.DataFrame.from_records(list(rows))
    con.register("_rows", frame)
    try:
        columns = ", ".join(f'_rows."{index}"' for index in range(width))
        con.execute(f"INSERT INTO {table} SELECT {columns} FROM _rows")  # table is ours, not input
    finally:
        con.unregister("_rows")


def build_icd10cm(path: Path, progress: ProgressCallback = no_progress) -> tuple[Path, float]:
    """Build the embedded default database; returns the path and the seconds it took."""
    started = time.perf_counter()
    rows = icd10cm_rows(progress)
    progress(0, 1, "writing vocab.duckdb")
    write_vocabulary(path, rows)
    progress(1, 1, "writing vocab.duckdb")
    return path, time.perf_counter() - started

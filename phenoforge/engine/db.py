"""Opening the vocabulary database: build it on first use, read it read-only afterwards."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

import duckdb
from pydantic import BaseModel

from phenoforge.config import ProgressCallback, no_progress, vocab_db_path
from phenoforge.engine.schema import ICD10CM, SCHEMA_VERSION
from phenoforge.errors import VocabularyError
from phenoforge.locks import file_lock


class VocabularyInfo(BaseModel):
    path: str
    source: str
    vocabulary_release: str
    built_at: str
    build_id: str
    n_concepts: int
    n_icd10cm: int
    n_billable: int
    counts_by_kind: dict[str, int]


def read_metadata(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(con.execute("SELECT key, value FROM metadata").fetchall())


def build_id(con: duckdb.DuckDBPyConnection) -> str:
    rows = con.execute("SELECT value FROM metadata WHERE key = 'build_id'").fetchall()
    if not rows:
        raise VocabularyError("the vocabulary database has no build id: rebuild it with `python -m phenoforge build`")
    return str(rows[0][0])


def _is_lock_error(error: Exception) -> bool:
    return "lock" in str(error).lower()


def _in_use(path: Path) -> VocabularyError:
    return VocabularyError(
        f"{path} is open for writing in another process (a build or load in progress?); "
        "wait for it to finish, or stop it, then try again"
    )


def database_state(path: Path) -> str:
    """``missing`` | ``corrupt`` | ``locked`` (another process holds it open for writing) |
    ``current`` | ``outdated`` (the default, from an older build) | ``foreign-outdated`` (an Athena
    load or other user database of an older schema)."""
    from phenoforge.engine.vocab_build import ICD_PACKAGE, ICD_PACKAGE_VERSION

    if not path.exists():
        return "missing"
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as error:
        return "locked" if _is_lock_error(error) else "corrupt"
    try:
        metadata = read_metadata(con)
    except duckdb.Error:
        return "corrupt"
    finally:
        con.close()
    schema_ok = metadata.get("schema_version") == SCHEMA_VERSION
    if metadata.get("source") != ICD_PACKAGE:
        # An Athena load (or a test fixture) is the user's own: never replaced behind their back.
        return "current" if schema_ok else "foreign-outdated"
    if schema_ok and metadata.get("source_version") == ICD_PACKAGE_VERSION:
        return "current"
    return "outdated"


def _build_lock(path: Path) -> AbstractContextManager[None]:
    """One builder at a time across processes; the others wait and then find it built."""
    return file_lock(path.with_name(f".{path.name}.lock"))


CORRUPT_CONSEQUENCES = (
    "a rebuild gives the vocabulary a new build id, so the dense index must be rebuilt too and the bundled "
    "libraries are re-checked; `python -m phenoforge build --force` does all of it (imported libraries keep "
    "their codes)"
)


def corrupt_vocabulary_error(path: Path) -> VocabularyError:
    return VocabularyError(
        f"{path} is corrupt (not a readable DuckDB vocabulary) and was left as it is; {CORRUPT_CONSEQUENCES}"
    )


def ensure_vocabulary(
    path: Path | None = None,
    progress: ProgressCallback = no_progress,
    force: bool = False,
    repair: bool = True,
) -> Path:
    """Build the embedded ICD-10-CM database unless an up-to-date one is already there.

    A missing or outdated file is rebuilt (atomically); an Athena-built database at the same path
    is kept as it is. A corrupt one is rebuilt only with ``repair`` (what ``build`` asks for):
    other commands say so instead of silently changing the build id under the dense index.
    """
    from phenoforge.engine.vocab_build import build_icd10cm

    path = Path(path) if path is not None else vocab_db_path()
    state = database_state(path)
    if state == "current" and not force:
        return path
    if state == "locked":
        raise _in_use(path)
    if state == "corrupt" and not (repair or force):
        raise corrupt_vocabulary_error(path)
    if state == "foreign-outdated" and not force:
        raise VocabularyError(
            f"{path} was loaded from another source with an older schema; reload it "
            "(`python -m phenoforge build --athena DIR`) or replace it with the embedded default "
            "(`python -m phenoforge build --force`)"
        )
    with _build_lock(path):
        state = database_state(path)
        if state == "locked":
            raise _in_use(path)
        if force or state != "current":
            build_icd10cm(path, progress)
    return path


def connect(path: Path | None = None, build: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the vocabulary read-only, building the embedded default first when needed."""
    path = Path(path) if path is not None else vocab_db_path()
    if build and path == vocab_db_path():
        ensure_vocabulary(path, repair=False)
    if not path.exists():
        raise VocabularyError(f"no vocabulary database at {path}: run `python -m phenoforge build` to create it")
    try:
        con = duckdb.connect(str(path), read_only=True)
        read_metadata(con)
    except duckdb.Error as error:
        if _is_lock_error(error):
            raise _in_use(path) from error
        raise VocabularyError(
            f"{path} is not a readable phenoforge vocabulary ({error}); {CORRUPT_CONSEQUENCES}"
        ) from error
    return con


def vocabulary_info(con: duckdb.DuckDBPyConnection) -> VocabularyInfo:
    metadata = read_metadata(con)
    counts = dict(
        con.execute("SELECT kind, count(*) FROM concept WHERE vocabulary_id = ? GROUP BY kind", [ICD10CM]).fetchall()
    )
    total, billable = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE billable AND vocabulary_id = ?) FROM concept",
        [ICD10CM],
    ).fetchall()[0]
    path_rows = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    return VocabularyInfo(
        path=str(path_rows[0][0]) if path_rows and path_rows[0][0] else "",
        source=metadata.get("source", "unknown"),
        vocabulary_release=metadata.get("vocabulary_release", "unknown"),
        built_at=metadata.get("built_at", "unknown"),
        build_id=metadata.get("build_id", ""),
        n_concepts=int(total),
        n_icd10cm=int(sum(counts.values())),
        n_billable=int(billable),
        counts_by_kind={str(kind): int(n) for kind, n in counts.items()},
    )

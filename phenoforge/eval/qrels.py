"""Curated sets (the qrels of this benchmark): loaded once per library and reused.

Every method's run is scored against the same ``Qrels``, so ground truth is resolved once per
library, vocabulary build and fan-out threshold, not once per method or per slider move.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import duckdb
from pydantic import BaseModel, Field

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.curated import Library, load_curated_concept_set, load_library
from phenoforge.engine.db import build_id
from phenoforge.errors import LibraryError, PhenoforgeError


class CuratedSet(BaseModel):
    """One cohort's ground truth: the curated codes the vocabulary knows, and the ones it does not."""

    cohort_id: str
    cohort_name: str
    codes: list[str]
    unresolvable: list[str] = Field(default_factory=list)


class Qrels(BaseModel):
    """The curated sets of (some cohorts of) one library."""

    library_id: str
    library_path: str
    group: str = Field(default="", description="library group for leave-one-group-out training")
    cohorts: dict[str, CuratedSet]
    skipped: dict[str, str] = Field(default_factory=dict, description="cohort id -> why it cannot be scored")

    def subset(self, cohort_ids: Sequence[str]) -> Qrels:
        """The same library restricted to ``cohort_ids`` (in that order)."""
        unknown = [cid for cid in cohort_ids if cid not in self.cohorts and cid not in self.skipped]
        if unknown:
            raise PhenoforgeError(f"cohort(s) {', '.join(map(repr, unknown))} not in library {self.library_id!r}")
        wanted = set(cohort_ids)
        return self.model_copy(
            update={
                "cohorts": {cid: self.cohorts[cid] for cid in cohort_ids if cid in self.cohorts},
                "skipped": {cid: reason for cid, reason in self.skipped.items() if cid in wanted},
            }
        )

    def skipped_lines(self) -> list[str]:
        """The skipped cohorts as a report lists them: ``cohort_id/*: reason``."""
        return [f"{cohort_id}/*: {reason}" for cohort_id, reason in self.skipped.items()]


_CACHE: OrderedDict[tuple[object, ...], dict[str, CuratedSet | str]] = OrderedDict()
"""Per library version, vocabulary build and threshold: each cohort resolved so far (its curated set,
or why it cannot be scored). Filled cohort by cohort, so scoring 3 cohorts of a 10,000-cohort library
resolves 3."""
_CACHE_SIZE = 8
_LOCK = threading.Lock()


def _manifest_stamp(path: Path) -> tuple[int, int]:
    stat = (path / "manifest.json").stat()
    return stat.st_ino, stat.st_mtime_ns


def _resolve(
    con: duckdb.DuckDBPyConnection, library: Library, cohort_id: str, fanout_threshold: int
) -> CuratedSet | str:
    """One cohort's curated set, or why it cannot be scored (the opened library: no manifest re-read)."""
    try:
        curated = load_curated_concept_set(con, library, cohort_id, fanout_threshold)
    except LibraryError as error:
        return str(error)
    if not curated.codes:
        return "no resolvable ground-truth codes"
    return CuratedSet(
        cohort_id=curated.cohort_id,
        cohort_name=curated.cohort_name,
        codes=curated.codes,
        unresolvable=curated.unresolvable,
    )


def load_qrels(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path | str,
    cohort_ids: Sequence[str] | None = None,
    fanout_threshold: int = 100,
    progress: ProgressCallback | None = None,
) -> Qrels:
    """The curated sets of ``cohort_ids`` (every cohort when None, in the library's order), each
    resolved once and cached; the manifest is read once per call.

    An unknown cohort id is an error; a cohort whose file is broken or whose codes the vocabulary
    does not know at all is listed in ``skipped`` with the reason, and the others are scored.
    """
    library = load_library(library_dir)
    path = Path(library.path).resolve()
    key = (str(path), _manifest_stamp(path), build_id(con), fanout_threshold)
    with _LOCK:
        known = _CACHE.get(key)
        if known is None:
            known = _CACHE[key] = {}
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        else:
            _CACHE.move_to_end(key)
    wanted = list(dict.fromkeys(library.cohort_ids if cohort_ids is None else [str(c) for c in cohort_ids]))
    listed = set(library.cohort_ids)
    unknown = [cid for cid in wanted if cid not in listed]
    if unknown:
        raise PhenoforgeError(f"cohort(s) {', '.join(map(repr, unknown))} not in library {library.library_id!r}")
    missing = [cid for cid in wanted if cid not in known]
    progress = progress or no_progress
    for position, cohort_id in enumerate(missing):
        progress(position, len(missing), f"curated sets: {cohort_id}")
        known[cohort_id] = _resolve(con, library, cohort_id, fanout_threshold)
    if missing:
        progress(len(missing), len(missing), "curated sets loaded")
    resolved = {cid: known[cid] for cid in wanted}
    return Qrels(
        library_id=library.library_id,
        library_path=str(library.path),
        group=str(getattr(library.manifest, "group", None) or library.library_id),
        cohorts={cid: found for cid, found in resolved.items() if isinstance(found, CuratedSet)},
        skipped={cid: found for cid, found in resolved.items() if isinstance(found, str)},
    )

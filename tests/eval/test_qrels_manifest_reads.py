"""Curated sets of a large library: the manifest is read once per load, not once per cohort."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from phenoforge.eval import qrels as qrels_module
from phenoforge.eval.harness import run_benchmark
from phenoforge.eval.qrels import load_qrels
from tests.fixture_library import write_icd_library

N_COHORTS = 40
CODES = ["E11", "I50", "J45", "I48"]


@pytest.fixture()
def big_library(tmp_path: Path) -> Path:
    cohorts = {f"c{i:03d}": (f"Cohort {i}", [CODES[i % len(CODES)]], True) for i in range(N_COHORTS)}
    return write_icd_library(tmp_path / "big", cohorts, "big")


@pytest.fixture()
def manifest_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every read of a ``manifest.json``, by path."""
    reads: list[Path] = []
    original = Path.read_text

    def counting(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "manifest.json":
            reads.append(self)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counting)
    qrels_module._CACHE.clear()
    yield reads
    qrels_module._CACHE.clear()


def test_loading_every_cohort_reads_the_manifest_once(
    fixture_con: duckdb.DuckDBPyConnection, big_library: Path, manifest_reads: list[Path]
) -> None:
    qrels = load_qrels(fixture_con, big_library)
    assert len(qrels.cohorts) == N_COHORTS
    assert len(manifest_reads) == 1


def test_a_few_cohorts_of_a_large_library_read_only_those(
    fixture_con: duckdb.DuckDBPyConnection, big_library: Path, manifest_reads: list[Path]
) -> None:
    report = run_benchmark(fixture_con, big_library, ["c001", "c002", "c003"], methods=["bm25"], k=5)
    assert {r.cohort_id for r in report.results} == {"c001", "c002", "c003"}
    assert len(manifest_reads) <= 2  # the harness's load and nothing per cohort


def test_cohorts_loaded_later_come_from_the_same_cache(
    fixture_con: duckdb.DuckDBPyConnection, big_library: Path, manifest_reads: list[Path]
) -> None:
    first = load_qrels(fixture_con, big_library, ["c001"])
    every = load_qrels(fixture_con, big_library)
    assert list(every.cohorts) == [f"c{i:03d}" for i in range(N_COHORTS)]
    assert every.cohorts["c001"] == first.cohorts["c001"]
    assert len(manifest_reads) == 2  # one per load_qrels call


def test_a_librarys_training_examples_read_its_manifest_once_not_per_cohort(
    fixture_con: duckdb.DuckDBPyConnection, big_library: Path, manifest_reads: list[Path]
) -> None:
    """The set builders' examples (every bundled cohort, at every fit) re-read the manifest per cohort."""
    from phenoforge.engine.curated import load_library
    from phenoforge.setbuild.corpus import library_examples

    library = load_library(big_library)
    manifest_reads.clear()
    examples = library_examples(fixture_con, library, None)
    assert len(examples) == N_COHORTS and [read for read in manifest_reads if big_library in read.parents] == []

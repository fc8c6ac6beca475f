"""A user's library that copies a bundled one with a code changed here and there is still a copy: the
builders scoring it are fitted, and transfer, without the copied group, and the report says so."""

from __future__ import annotations

from pathlib import Path

import duckdb

from phenoforge.config import libraries_dir
from phenoforge.engine.curated import load_curated_concept_set
from phenoforge.eval.harness import run_benchmark
from phenoforge.setbuild.transfer import COPY_JACCARD
from tests.fixture_library import write_icd_library
from tests.methods.test_set_builders_reuse_and_copies import HCC_ID, _install_development_libraries
from tests.methods.test_transfer_leakage import (
    _fresh_process_cache,
    _mark_imported,
    _transferred_from,
    fitted_for_import,
)

__all__ = ["_fresh_process_cache"]  # autouse: a fresh fit cache and small models for every test here

FOREIGN = "S72.001A"
"""A code no development library lists for a diabetes or heart-failure cohort."""


def _codes(con: duckdb.DuckDBPyConnection, library: Path, cohort_id: str) -> list[str]:
    return load_curated_concept_set(con, library, cohort_id).codes


def _one_code_changed(con: duckdb.DuckDBPyConnection, library: Path, cohort_id: str) -> list[str]:
    """The bundled cohort's list with its last code swapped for a foreign one."""
    codes = _codes(con, library, cohort_id)
    return [*codes[:-1], FOREIGN]


def _jaccard(a: list[str], b: list[str]) -> float:
    return len(set(a) & set(b)) / len(set(a) | set(b))


def test_a_near_copy_with_one_code_changed_never_sees_the_lists_it_copies(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    installed = _install_development_libraries()
    hcc = installed[HCC_ID]
    changed = _one_code_changed(fixture_con, hcc, "dm2")
    assert COPY_JACCARD <= _jaccard(changed, _codes(fixture_con, hcc, "dm2")) < 1.0  # near, not exact
    copy, fitted = fitted_for_import(fixture_con, {"my-dm2": ("Type 2 diabetes", changed, False)})
    assert fitted.knowledge is not None
    assert HCC_ID not in {c.library_id for c in fitted.knowledge.cohorts}
    assert any("my-conditions lists cohorts with exactly their codes, or nearly" in n for n in fitted.notes)
    assert HCC_ID not in _transferred_from(fixture_con, copy, "Type 2 diabetes mellitus")


def test_an_overlapping_but_independent_list_keeps_the_knowledge(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """Half of a bundled list (Jaccard well under the threshold) is a different curation, not a copy."""
    installed = _install_development_libraries()
    hcc = installed[HCC_ID]
    half = [code for code in _codes(fixture_con, hcc, "dm2") if code.startswith(("E11.2", "E11.5"))]
    assert _jaccard(half, _codes(fixture_con, hcc, "dm2")) < COPY_JACCARD
    assert _jaccard(half, _codes(fixture_con, hcc, "dm2-kidney")) < COPY_JACCARD
    _own, fitted = fitted_for_import(fixture_con, {"my-dm2": ("Diabetes complications", half, False)})
    assert fitted.knowledge is not None
    assert HCC_ID in {c.library_id for c in fitted.knowledge.cohorts}
    assert not any("lists cohorts with exactly their codes" in n for n in fitted.notes)


def test_the_benchmark_report_names_the_held_out_pairs(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """One of the two scored cohorts copies a bundled list (a minority of the library and of every group):
    that bundled cohort is held out, its group stays, and the report names the pair."""
    installed = _install_development_libraries()
    hcc = installed[HCC_ID]
    cohorts = {
        cohort_id: (name, _one_code_changed(fixture_con, hcc, cohort_id), False)
        for cohort_id, name in (("dm2", "Type 2 diabetes mellitus"), ("hf", "Heart failure"))
    }
    copy = write_icd_library(libraries_dir() / "mine", cohorts, library_id="my-conditions")
    _mark_imported(copy)
    report = run_benchmark(fixture_con, copy, ["dm2", "hf"], methods=["curated_transfer"])
    record = report.methods["curated_transfer"]
    assert record.held_out is not None and not record.held_out.groups
    assert {(p.scored_cohort, p.library_id, p.cohort_id) for p in record.held_out.pairs} >= {("dm2", HCC_ID, "dm2")}
    assert any("curated knowledge without" in n and f"dm2 ~ {HCC_ID}/dm2" in n for n in record.notes), record.notes
    assert HCC_ID in record.trained_on

"""curated_transfer attacked: paths by which a scored cohort could see its own curated list."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

import duckdb
import pytest

import phenoforge.setbuild.builders.learned as learned_builder
from phenoforge.config import libraries_dir
from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import set_building
from phenoforge.methods.base import MethodContext
from phenoforge.methods.retrieval import Retrieval
from phenoforge.setbuild import api
from phenoforge.setbuild.candidates import RETRIEVAL_DEPTH
from tests.fixture_library import CohortSpec, write_icd_library
from tests.methods.test_set_builders_reuse_and_copies import (
    ELIX_COHORTS,
    ELIX_ID,
    HCC_ID,
    SMALL,
    _install_development_libraries,
)
from tests.setbuild.conftest import TRAIN_COHORTS


@pytest.fixture(autouse=True)
def _fresh_process_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    set_building.clear_fitted()
    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **SMALL))


def _mark_imported(path: Path) -> None:
    library = load_library(path)
    library.manifest.report = {"build": {"imported_from": f"/home/me/{library.library_id}.csv"}}
    (path / "manifest.json").write_text(library.manifest.model_dump_json(indent=1), encoding="utf-8")


def fitted_for_import(
    con: duckdb.DuckDBPyConnection, cohorts: Mapping[str, CohortSpec]
) -> tuple[Path, api.FittedBuilders]:
    """``cohorts`` installed as the user's import 'my-conditions', and the builders that would score it."""
    library = write_icd_library(libraries_dir() / "mine", cohorts, library_id="my-conditions")
    _mark_imported(library)
    fitted = set_building.fitted_for(_context(con, library))
    assert fitted.knowledge is not None
    return library, fitted


def _context(con: duckdb.DuckDBPyConnection, library: Path) -> MethodContext:
    manifest = load_library(library).manifest
    return MethodContext(
        con=con,
        hierarchy=get_hierarchy(con),
        retrieval=Retrieval(con, None, RETRIEVAL_DEPTH),
        library_id=manifest.library_id,
        library_group=manifest.group or manifest.library_id,
        library_path=str(library),
    )


def _transferred_from(con: duckdb.DuckDBPyConnection, library: Path, query: str) -> set[str]:
    """The libraries whose curated lists curated_transfer's answer for ``query`` names."""
    context = _context(con, library)
    built = set_building.build_for(context, "curated_transfer", query, set_building.fitted_for(context))
    return {
        item.provenance.rule.split("curated cohort ")[1].split("/")[0]
        for item in built.codes
        if "curated cohort" in item.provenance.rule
    }


def test_a_user_import_copying_a_bundled_library_under_another_id_never_sees_its_lists(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """Scored as 'my-conditions' (its own group), the copy must not be answered with CMS-HCC's identical lists."""
    _install_development_libraries()
    copy, fitted = fitted_for_import(fixture_con, TRAIN_COHORTS)
    assert HCC_ID not in {c.library_id for c in fitted.knowledge.cohorts}
    assert any("my-conditions lists cohorts with exactly their codes" in n for n in fitted.notes)
    assert HCC_ID not in _transferred_from(fixture_con, copy, "Heart failure")


def test_a_library_directory_outside_the_installed_ones_copying_a_bundled_one_never_sees_its_lists(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    """Not installed, not marked imported, no group declared: its copied lists are still hidden."""
    _install_development_libraries()
    copy = write_icd_library(tmp_path / "elsewhere", ELIX_COHORTS, library_id="my-elix")
    fitted = set_building.fitted_for(_context(fixture_con, copy))
    assert fitted.knowledge is not None
    assert ELIX_ID not in {c.library_id for c in fitted.knowledge.cohorts}
    assert ELIX_ID not in _transferred_from(fixture_con, copy, "Congestive heart failure")


def test_a_bundled_library_keeps_another_groups_identical_list_as_knowledge(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """The copy check is for libraries outside the knowledge: Elixhauser scored still sees CMS-HCC's heart failure."""
    installed = _install_development_libraries()
    fitted = set_building.fitted_for(_context(fixture_con, installed[ELIX_ID]))
    assert fitted.knowledge is not None
    assert {c.library_id for c in fitted.knowledge.cohorts} == {HCC_ID}


def test_a_benchmark_of_a_copy_says_which_groups_its_knowledge_hides(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """Through the harness: the copied heart-failure cohort is not answered by the list it copies."""
    _install_development_libraries()
    copy = write_icd_library(libraries_dir() / "mine", TRAIN_COHORTS, library_id="my-conditions")
    _mark_imported(copy)
    report = run_benchmark(fixture_con, copy, ["hf"], methods=["curated_transfer"])
    assert any("exactly their codes" in n for n in report.methods["curated_transfer"].notes)


def test_a_copy_scored_after_an_honest_library_of_the_same_id_is_not_served_the_cached_fit(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    """Same library id, two directories (or one edited in place): the process cache must not reuse the
    first one's knowledge for the copy."""
    _install_development_libraries()
    honest = write_icd_library(
        tmp_path / "honest", {"own": ("Obesity and asthma", ["E66", "J45"], True)}, library_id="my-lists"
    )
    first = set_building.fitted_for(_context(fixture_con, honest))
    assert first.knowledge is not None and HCC_ID in {c.library_id for c in first.knowledge.cohorts}
    copy = write_icd_library(tmp_path / "copy", TRAIN_COHORTS, library_id="my-lists")
    fitted = set_building.fitted_for(_context(fixture_con, copy))
    assert fitted.knowledge is not None and HCC_ID not in {c.library_id for c in fitted.knowledge.cohorts}
    write_icd_library(honest, TRAIN_COHORTS, library_id="my-lists")  # edited in place into a copy
    edited = set_building.fitted_for(_context(fixture_con, honest))
    assert edited.knowledge is not None and HCC_ID not in {c.library_id for c in edited.knowledge.cohorts}


def test_editing_a_library_that_is_only_knowledge_refits_the_builders(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """A non-development library never trains, but its lists are transfer features: editing one in place
    must not reuse the bundle fitted with its old lists."""
    installed = _install_development_libraries()
    knowledge_only = write_icd_library(
        libraries_dir() / "charlson", {"chf": ("Congestive heart failure", ["I50"], True)}, library_id="charlson-x"
    )
    libraries = [load_library(path) for path in [*installed.values(), knowledge_only]]
    first = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    again = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert any(note.startswith("reused the builders") for note in again.notes)
    write_icd_library(knowledge_only, {"chf": ("Congestive heart failure", ["I50.2"], True)}, library_id="charlson-x")
    libraries = [load_library(path) for path in [*installed.values(), knowledge_only]]
    edited = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert not any(note.startswith("reused the builders") for note in edited.notes)
    assert edited.knowledge is not None and first.knowledge is not None
    (before,) = [c for c in first.knowledge.cohorts if c.library_id == "charlson-x"]
    (after,) = [c for c in edited.knowledge.cohorts if c.library_id == "charlson-x"]
    assert len(after.ids) < len(before.ids)


def test_a_copy_with_one_unreadable_cohort_file_still_has_its_copied_lists_hidden(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """The copy check reads the scored library cohort by cohort: one broken file neither stops the
    benchmark of the others nor lets them see the lists they copy."""
    _install_development_libraries()
    copy = write_icd_library(libraries_dir() / "mine", TRAIN_COHORTS, library_id="my-conditions")
    _mark_imported(copy)
    (copy / "cohorts" / "pvd.json").write_text("{ broken", encoding="utf-8")
    fitted = set_building.fitted_for(_context(fixture_con, copy))
    assert fitted.knowledge is not None
    assert HCC_ID not in {c.library_id for c in fitted.knowledge.cohorts}
    report = run_benchmark(fixture_con, copy, ["hf", "af"], methods=["curated_transfer"])
    assert {r.cohort_id for r in report.results} == {"hf", "af"}


@pytest.mark.parametrize("declared", ["CMS-HCC", " cms-hcc ", "cms_hcc", None])
def test_a_near_duplicate_with_a_misspelt_group_is_held_out_with_its_group(
    fixture_con: duckdb.DuckDBPyConnection, declared: str | None
) -> None:
    """A second CMS-HCC version whose manifest spells the group otherwise: the builders that score it
    must neither be trained on nor see the lists of the other CMS-HCC version. "CMS-HCC" and "cms_hcc"
    used to refuse every set builder ("would inform a query of its own library group")."""
    _install_development_libraries()
    v24 = write_icd_library(libraries_dir() / "v24", TRAIN_COHORTS, library_id="cms-hcc-v24-fixture", group=declared)
    report = run_benchmark(fixture_con, v24, ["hf", "af"], methods=["learned", "curated_transfer"])
    for method in ("learned", "curated_transfer"):
        record = report.methods[method]
        scored = [r for r in report.results if r.method == method]
        assert {r.cohort_id for r in scored} == {"hf", "af"}, report.skipped  # held out, not refused
        assert record.trained_on == [ELIX_ID], (method, record.trained_on)


def test_a_development_copy_declaring_another_group_is_scored_held_out_with_its_family(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """'cms-hcc-v28-old' declaring group 'old': its builders are fitted without 'old' and without CMS-HCC,
    so they score it (every set builder was refused: the fit held out 'old' alone)."""
    _install_development_libraries()
    old = write_icd_library(libraries_dir() / "old", TRAIN_COHORTS, library_id="cms-hcc-v28-old", group="old")
    report = run_benchmark(fixture_con, old, ["hf", "af"], ["subtree", "learned", "curated_transfer"])
    assert report.skipped == []
    for method in ("subtree", "learned", "curated_transfer"):
        assert report.methods[method].trained_on == [ELIX_ID], (method, report.methods[method])
    fitted = set_building.fitted_for(_context(fixture_con, old))
    assert fitted.knowledge is not None and {"old", "cms-hcc"} <= fitted.knowledge.excluded
    assert HCC_ID not in {c.library_id for c in fitted.knowledge.cohorts}

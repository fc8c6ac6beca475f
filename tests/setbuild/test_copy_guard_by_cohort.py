"""The near-copy guard holds out at the grain of the overlap (issue 40): an independent library with a
near copy here and there loses those bundled cohorts only and keeps its trained set builders; a library
that copies systematically loses the whole group; the report, the CLI and the Benchmark page say which."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import duckdb
import pytest

from phenoforge.cli.benchmark import _benchmark_table
from phenoforge.config import libraries_dir
from phenoforge.dashboard.benchmark import held_out_view
from phenoforge.engine.curated import load_library
from phenoforge.eval.harness import run_benchmark
from phenoforge.eval.models import SYSTEMIC_SHARE
from phenoforge.methods import set_building
from phenoforge.setbuild.transfer import COPY_JACCARD
from tests.fixture_library import CohortSpec, write_icd_library
from tests.methods.test_set_builders_reuse_and_copies import ELIX_ID, HCC_ID, _install_development_libraries
from tests.methods.test_transfer_leakage import _context, _fresh_process_cache, _mark_imported
from tests.setbuild.test_near_copy_leakage import _codes, _jaccard, _one_code_changed

__all__ = ["_fresh_process_cache"]  # autouse: a fresh fit cache and small models for every test here

BILLABLE_BY_CATEGORY = {
    "E10": ["E10.9", "E10.10"],
    "E11": ["E11.21", "E11.22", "E11.29", "E11.51", "E11.65", "E11.9"],
    "E66": ["E66.0", "E66.9"],
    "I50": ["I50.21", "I50.22", "I50.9"],
    "I48": ["I48.0", "I48.91"],
    "J45": ["J45.20", "J45.909"],
    "S72": ["S72.001A", "S72.001D"],
}
"""The fixture vocabulary's billable codes by category."""


def independent_cohorts(n: int) -> dict[str, CohortSpec]:
    """``n`` lists of three codes from three different categories: no bundled fixture list (each within one
    category) is within Jaccard 1/3 of one, so none is a near copy."""
    categories = sorted(BILLABLE_BY_CATEGORY)
    lists = []
    for trio in combinations(categories, 3):
        for offset in range(2):
            lists.append(
                [BILLABLE_BY_CATEGORY[c][(offset + i) % len(BILLABLE_BY_CATEGORY[c])] for i, c in enumerate(trio)]
            )
    return {f"mix-{i:03d}": (f"Mixed conditions {' '.join(codes)}", codes, False) for i, codes in enumerate(lists[:n])}


def _import(cohorts: dict[str, CohortSpec], library_id: str = "my-conditions") -> Path:
    library = write_icd_library(libraries_dir() / "mine", cohorts, library_id=library_id)
    _mark_imported(library)
    return library


def _visible(fitted: set_building.FittedBuilders) -> set[tuple[str, str]]:
    assert fitted.knowledge is not None
    return {(c.library_id, c.cohort_id) for c in fitted.knowledge.cohorts}


def _one_in_a_hundred(con: duckdb.DuckDBPyConnection, hcc: Path) -> dict[str, CohortSpec]:
    copy = _one_code_changed(con, hcc, "dm2")
    assert COPY_JACCARD <= _jaccard(copy, _codes(con, hcc, "dm2")) < 1.0
    return {**independent_cohorts(99), "copy-dm2": ("Type 2 diabetes mellitus", copy, False)}


def test_one_cohort_in_a_hundred_copied_hides_that_cohort_and_keeps_the_trained_builders(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    installed = _install_development_libraries()
    library = _import(_one_in_a_hundred(fixture_con, installed[HCC_ID]))
    fitted = set_building.fitted_for(_context(fixture_con, library))
    assert fitted.training_libraries == sorted([HCC_ID, ELIX_ID])  # nothing held out of the training
    assert fitted.held_out is not None and fitted.held_out.groups == {}
    pairs = {(p.scored_cohort, p.library_id, p.cohort_id) for p in fitted.held_out.pairs}
    assert pairs == {("copy-dm2", HCC_ID, "dm2"), ("copy-dm2", ELIX_ID, "dm2")}
    visible = _visible(fitted)
    assert not visible & {(HCC_ID, "dm2"), (ELIX_ID, "dm2")}  # the copied lists are hidden ...
    assert {(HCC_ID, "dm1"), (HCC_ID, "hf"), (ELIX_ID, "x-hf")} <= visible  # ... and only they
    assert fitted.knowledge is not None
    cohorts = fitted.knowledge.knowledge.cohorts
    for_copy = fitted.knowledge.visible_for("Type 2 diabetes mellitus")  # the copying cohort sees neither group
    assert not any(
        seen for seen, c in zip(for_copy.tolist(), cohorts, strict=True) if c.groups & {"cms-hcc", "elixhauser"}
    )
    assert fitted.knowledge.matches("Type 2 diabetes mellitus") == []
    # the copying cohort is answered by builders fitted without both groups it copies; the others by the full fit
    assert fitted.held_out.fitted_without == {"copy-dm2": ["cms-hcc", "elixhauser"]}
    assert fitted.for_query("Type 2 diabetes mellitus").training_libraries == []
    assert fitted.for_query(independent_cohorts(1)["mix-000"][0]) is fitted
    other = independent_cohorts(1)["mix-000"][0]  # every other scored cohort sees the rest of both groups
    assert {(HCC_ID, "dm1"), (ELIX_ID, "x-hf")} <= {
        (m.cohort.library_id, m.cohort.cohort_id) for m in fitted.knowledge.matches(other, depth=50)
    }
    built = set_building.build_for(
        _context(fixture_con, library), "curated_transfer", "Type 2 diabetes mellitus", fitted
    )
    sources = {
        item.provenance.rule.split("curated cohort ")[1].split(" ")[0]
        for item in built.codes
        if "curated cohort" in item.provenance.rule
    }
    assert not sources & {f"{HCC_ID}/dm2", f"{ELIX_ID}/dm2"}, sources


def test_an_import_without_any_near_copy_holds_nothing_out(fixture_con: duckdb.DuckDBPyConnection) -> None:
    _install_development_libraries()
    library = _import(independent_cohorts(40))
    fitted = set_building.fitted_for(_context(fixture_con, library))
    assert fitted.held_out is not None and fitted.held_out.pairs == [] and fitted.held_out.groups == {}
    assert "nothing held out" in fitted.held_out.summary()
    assert fitted.training_libraries == sorted([HCC_ID, ELIX_ID])
    assert (HCC_ID, "dm2") in _visible(fitted) and (ELIX_ID, "dm2") in _visible(fitted)


def test_a_library_that_mostly_copies_one_group_loses_that_group_whole(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """Three of four cohorts near copies of CMS-HCC's: more than ``SYSTEMIC_SHARE`` of the scored library, so
    the group is held out of the training and the knowledge; Elixhauser keeps training it."""
    installed = _install_development_libraries()
    hcc = installed[HCC_ID]
    copies = {
        "copy-dm2": ("Type 2 diabetes mellitus", _one_code_changed(fixture_con, hcc, "dm2"), False),
        "copy-dm1": ("Type 1 diabetes mellitus", _codes(fixture_con, hcc, "dm1"), False),
        "copy-hf": ("Heart failure", _codes(fixture_con, hcc, "hf-systolic"), False),
        **independent_cohorts(1),
    }
    assert SYSTEMIC_SHARE < 3 / 4
    library = _import(copies)
    fitted = set_building.fitted_for(_context(fixture_con, library))
    assert fitted.held_out is not None and set(fitted.held_out.groups) == {"cms-hcc"}
    assert "3 of the 4 scored cohorts" in fitted.held_out.groups["cms-hcc"]
    assert fitted.training_libraries == [ELIX_ID]
    assert not {lib for lib, _c in _visible(fitted)} & {HCC_ID}
    assert (ELIX_ID, "dm2") not in _visible(fitted) and (ELIX_ID, "x-hf") in _visible(fitted)


def test_report_cli_and_page_name_the_held_out_pairs(fixture_con: duckdb.DuckDBPyConnection) -> None:
    installed = _install_development_libraries()
    library = _import(_one_in_a_hundred(fixture_con, installed[HCC_ID]))
    cohorts = ["copy-dm2", "mix-000"]
    report = run_benchmark(fixture_con, library, cohorts, methods=["bm25", "learned", "curated_transfer"])
    record = report.methods["curated_transfer"]
    assert "untuned" not in record.status and record.trained_on == sorted([HCC_ID, ELIX_ID])
    assert record.held_out is not None and len(record.held_out.pairs) == 2
    assert report.methods["bm25"].held_out is None  # a method without the knowledge holds nothing out
    assert any(f"copy-dm2 ~ {HCC_ID}/dm2" in note for note in record.notes)
    text = _benchmark_table(report)
    assert "near-copy guard (learned, curated_transfer): 2 bundled cohort(s) held out" in text
    assert (
        f"copy-dm2 ~ {HCC_ID}/dm2: Jaccard" in text and "(held out: cohort; answered by builders fitted without" in text
    )
    view = held_out_view(report)
    assert view is not None and not view.whole_groups and view.methods == ["learned", "curated_transfer"]
    assert {(row["scored cohort"], row["bundled cohort"], row["held out"]) for row in view.rows} == {
        ("copy-dm2", "dm2", "this cohort")
    }
    assert len(view.rows) == 2
    again = type(report).model_validate_json(report.model_dump_json())  # a saved run shows the same
    assert again.methods["curated_transfer"].held_out == record.held_out


def test_a_set_builder_with_nothing_to_train_on_is_degraded_not_ok(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """No bundled library installed: the builders run on untuned defaults; the record, the CLI say degraded."""
    library = _import(independent_cohorts(3))
    report = run_benchmark(fixture_con, library, ["mix-000"], methods=["bm25", "curated_transfer"])
    record = report.methods["curated_transfer"]
    assert record.trained_on == []
    assert record.status.startswith("degraded: ") and "untuned defaults" in record.status
    assert report.methods["bm25"].status == "ok"
    assert "! curated_transfer is degraded" in _benchmark_table(report)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_the_systemic_share_decides_between_cohort_and_group(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch, share: float
) -> None:
    """The same 1-in-100 library: held out by cohort under the rule, by group when every copy counted as systemic."""
    from phenoforge.setbuild import knowledge_store

    monkeypatch.setattr(knowledge_store, "SYSTEMIC_SHARE", share)
    installed = _install_development_libraries()
    library = _import(_one_in_a_hundred(fixture_con, installed[HCC_ID]))
    fitted = set_building.fitted_for(_context(fixture_con, library))
    assert fitted.held_out is not None
    assert bool(fitted.held_out.groups) is (share == 0.0)
    assert (fitted.training_libraries == []) is (share == 0.0)
    assert load_library(library).manifest.library_id == "my-conditions"


def test_a_cohort_copying_one_group_is_answered_by_that_groups_held_out_fit(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """A near copy of a CMS-HCC list only: its builders are fitted on Elixhauser alone (as CMS-HCC's own
    cohorts are scored); through the benchmark, its learned set is the one that fit builds."""
    installed = _install_development_libraries()
    hcc = installed[HCC_ID]
    copy = _codes(fixture_con, hcc, "hf-systolic")  # ELIX lists no systolic heart failure
    cohorts = {**independent_cohorts(99), "copy-hf": ("Systolic heart failure", copy, False)}
    library = _import(cohorts)
    fitted = set_building.fitted_for(_context(fixture_con, library))
    assert fitted.held_out is not None and fitted.held_out.groups == {}
    assert fitted.held_out.fitted_without == {"copy-hf": ["cms-hcc"]}
    routed = fitted.for_query("Systolic heart failure")
    assert routed.training_libraries == [ELIX_ID] and fitted.training_libraries == sorted([HCC_ID, ELIX_ID])
    report = run_benchmark(fixture_con, library, ["copy-hf", "mix-000"], methods=["learned"])
    record = report.methods["learned"]
    assert any("answered by builders fitted without the copied group(s)" in n for n in record.notes), record.notes
    answered = {r.cohort_id: r.predicted_codes for r in report.results}
    direct = set_building.build_for(_context(fixture_con, library), "learned", "Systolic heart failure", routed)
    assert answered["copy-hf"] == [c.code for c in direct.codes]

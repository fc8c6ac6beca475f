"""A run exported and imported again is the same run: codes, ranks, scores and provenance."""

from __future__ import annotations

import duckdb
import pytest

from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.engine.hybrid import fusion_depth
from phenoforge.eval.harness import run_methods
from phenoforge.eval.qrels import Qrels, load_qrels
from phenoforge.eval.runs import Run, parse_run_csv, parse_run_json, run_from_results, run_to_csv, run_to_json
from phenoforge.methods import CohortTask, MethodContext, get_method
from phenoforge.methods.retrieval import Retrieval
from tests.fixture_library import write_icd_library

COHORTS = {
    "dm2": ("Type 2 diabetes mellitus", ["E11"], True),
    "hf": ("Heart failure", ["I50"], True),
    "asthma": ("Asthma", ["J45"], True),
}
# ranks with gaps, scores needing every digit, negative and tiny scores, unranked rows, provenance
# with the separators a join would use, quotes, commas, and a formula-looking start
ORIGINAL = """cohort_id,code,rank,score,provenance
dm2,E11.9,1,0.12345678901234568,"model said: ""diabetes""; top hit"
dm2,E11.65,3,-2.5e-07,
dm2,E11.21,7,1e+300,=not a formula
hf,I50.9,,,
hf,I50.21,,0.5,
asthma,J45.909,2,3.0,a; b
asthma,J45.20,1,,
"""


@pytest.fixture(scope="module")
def qrels(fixture_con: duckdb.DuckDBPyConnection, tmp_path_factory: pytest.TempPathFactory) -> Qrels:
    return load_qrels(fixture_con, write_icd_library(tmp_path_factory.mktemp("libs") / "lib", COHORTS, "lib"))


@pytest.fixture(scope="module")
def hierarchy(fixture_con: duckdb.DuckDBPyConnection) -> Hierarchy:
    return get_hierarchy(fixture_con)


@pytest.fixture(scope="module")
def original(qrels: Qrels, hierarchy: Hierarchy) -> Run:
    return parse_run_csv(ORIGINAL, qrels, hierarchy, "mine")


def test_the_original_keeps_what_the_file_says(original: Run) -> None:
    dm2 = original.cohorts["dm2"]
    assert [(e.code, e.rank, e.score) for e in dm2] == [
        ("E11.9", 1, 0.12345678901234568),
        ("E11.65", 3, -2.5e-07),
        ("E11.21", 7, 1e300),
    ]
    assert dm2[0].provenance == ['model said: "diabetes"; top hit']
    assert dm2[1].provenance == ["imported: mine"]  # no provenance given: where it came from
    assert [e.rank for e in original.cohorts["hf"]] == [None, None]


@pytest.mark.parametrize(("write", "read"), [(run_to_csv, parse_run_csv), (run_to_json, parse_run_json)])
def test_export_then_import_gives_the_same_run(
    original: Run,
    qrels: Qrels,
    hierarchy: Hierarchy,
    write,
    read,  # noqa: ANN001
) -> None:
    again = read(write(original), qrels, hierarchy, "mine")
    assert again.cohorts == original.cohorts
    assert write(again) == write(original)


def test_a_saved_report_exports_the_run_it_scored(
    fixture_con: duckdb.DuckDBPyConnection, original: Run, qrels: Qrels, hierarchy: Hierarchy
) -> None:
    report = run_methods(fixture_con, qrels, ["hybrid"], extra_runs=[original])
    assert run_from_results(report.results, "mine").cohorts == original.cohorts
    # a built-in's run too: its own ranks, RRF scores and provenance, not positions and blanks
    hybrid = run_from_results(report.results, "hybrid")
    context = MethodContext(
        con=fixture_con, hierarchy=hierarchy, retrieval=Retrieval(fixture_con, None, fusion_depth(25))
    )
    for cohort in qrels.cohorts.values():
        produced = get_method("hybrid").predict(
            context, CohortTask(cohort_id=cohort.cohort_id, query=cohort.cohort_name)
        )
        assert hybrid.cohorts[cohort.cohort_id] == list(produced)
    assert parse_run_csv(run_to_csv(hybrid), qrels, hierarchy, "hybrid").cohorts == hybrid.cohorts

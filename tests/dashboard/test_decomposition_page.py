"""Decomposition: the offline decomposer over the runnable cases, numbers as the package has them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge.agent.offline import offline_decomposer
from phenoforge.dashboard import decomposition as service
from phenoforge.dashboard.decomposition import gap_sentence
from phenoforge.engine.dense import load_dense_if_ready
from phenoforge.errors import PhenoforgeError
from phenoforge.eval.decomposition import OHDSI_TEST_CASES, DecompositionTestCase, score_decomposition
from phenoforge.eval.models import DecompositionCaseResult, DecompositionReport
from tests.dashboard.conftest import frame_with, shown
from tests.dashboard.fixture_data import FIXTURE_COHORTS
from tests.engine.fake_embedder import FakeEmbedder


def test_offline_run_matches_score_decomposition(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    at = app("pages/4_Decomposition.py").run()
    assert not at.exception
    assert at.selectbox(key="dec_set").value == "ohdsi"  # the only set runnable on the fixture
    assert at.radio(key="dec_decomposer").options == ["offline"]  # no key set
    assert at.radio(key="dec_split").options == ["all cases", "development half", "test half"]
    at.button(key="dec_run").click().run()
    assert not at.exception
    cases = [c for c in OHDSI_TEST_CASES if c.cohort_id in FIXTURE_COHORTS]
    dense = load_dense_if_ready(dash_con, index_dir=dash / "dense", embed_fn=FakeEmbedder())
    expected = score_decomposition(
        dash_con, dash / "libraries", offline_decomposer(dash_con), dense=dense, k=10, test_cases=cases
    )
    metrics = {m.label: m.value for m in at.metric}
    assert any(m.value.startswith(f"**{gap_sentence(expected.mean_gap)}**") for m in at.markdown)
    assert metrics["Decomposed"] == f"{expected.mean_decomposed_hierarchical_score:.3f}"
    assert metrics["Baseline (name searched)"] == f"{expected.mean_baseline_hierarchical_score:.3f}"
    assert metrics["Cases scored"] == str(expected.n_scored) == str(len(cases))
    table = frame_with(at, "seed terms")
    assert list(table["cohort"]) == [r.cohort_id for r in expected.results]
    assert list(table["difference"]) == pytest.approx([-r.gap for r in expected.results])
    assert list(table["seed terms"]) == ["; ".join(r.seed_terms) for r in expected.results]
    assert len(at.expander) == len(cases)


def test_split_picks_a_half(app: Callable[[str], AppTest]) -> None:
    at = app("pages/4_Decomposition.py").run()
    at.radio(key="dec_split").set_value("test").run()
    runnable = [c for c in OHDSI_TEST_CASES if c.cohort_id in FIXTURE_COHORTS and c.split == "test"]
    assert at.button(key="dec_run").label == f"Run {len(runnable)} test cases"


def test_uploaded_case_file_runs_and_bad_lines_are_named(app: Callable[[str], AppTest]) -> None:
    at = app("pages/4_Decomposition.py").run()
    at.selectbox(key="dec_set").set_value(service.UPLOADED).run()
    assert not at.exception
    at.file_uploader(key="dec_upload").set_value(
        ("mine.csv", b"population_description,cohort_id\nadults with gout,999\nkids with asthma,\n", "text/csv")
    ).run()
    errors = shown(" ".join(e.value for e in at.error))
    assert "mine.csv: 2 bad line(s)" in errors and "line 2:" in errors and "line 3: cohort_id is empty" in errors
    at.file_uploader(key="dec_upload").set_value(
        (
            "mine.csv",
            b"population_description,cohort_id,library,source\n"
            b"children with asthma using inhaled steroids,521,ohdsi,my trial\n"
            b"adults with heart failure on a beta blocker,519,,my trial\n",
            "text/csv",
        )
    ).run()
    assert not at.error
    at.button(key="dec_run").click().run()
    assert not at.exception
    table = frame_with(at, "seed terms")
    assert list(table["cohort"]) == ["521", "519"]
    assert list(table["seed terms"]) == ["asthma", "heart failure"]
    assert {m.label: m.value for m in at.metric}["Cases scored"] == "2"


def test_repeats_show_spread_and_interval(app: Callable[[str], AppTest]) -> None:
    at = app("pages/4_Decomposition.py").run()
    at.number_input(key="dec_repeat").set_value(2).run()
    at.button(key="dec_run").click().run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert "95% CI, decomposed − baseline" in metrics and metrics["SD of the per-run means"] == "0.000"  # stable
    spread = frame_with(at, "distinct term sets")
    assert set(spread["distinct term sets"]) == {1} and set(spread["runs scored"]) == {2}


def _report(errors: list[str | None]) -> DecompositionReport:
    results = [
        DecompositionCaseResult(
            cohort_id=f"c{i}",
            cohort_name="n",
            population_description="d",
            seed_terms=[],
            baseline_hierarchical_score=0.5,
            decomposed_hierarchical_score=0.0,
            gap=0.0,
            error=error,
            error_type="ClaudeTimeoutError" if error else None,
        )
        for i, error in enumerate(errors)
    ]
    scored = sum(1 for error in errors if error is None)
    return DecompositionReport(results=results, mean_gap=0.0, n_scored=scored)


def test_run_status_never_shows_failure_as_a_score() -> None:
    failed = service.run_status(_report(["no answer within 5 s", "no answer within 5 s"]))
    assert failed.level == "error" and failed.message.startswith("0 of 2 cases ran: ClaudeTimeoutError")
    partial = service.run_status(_report([None, "no answer within 5 s"]))
    assert partial.level == "warning" and "means are over the 1 that ran" in partial.message
    assert service.run_status(_report([None])).level == "ok"
    rows = service.case_rows(_report([None, "boom"]))
    assert rows[1]["decomposed"] is None and rows[1]["error"] == "ClaudeTimeoutError: boom"


def test_unknown_decomposer_and_undecodable_upload(dash_con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(PhenoforgeError, match="unknown decomposer"):
        service.make_decomposer("oracle", dash_con)
    with pytest.raises(PhenoforgeError, match="not UTF-8"):
        service.uploaded_cases(b"\xff\xfe\x00bad", "x.csv")
    case = DecompositionTestCase(population_description="d", cohort_id="521", source="s", library_id="", split="dev")
    assert service.cases_of([case], "dev") == [case] and service.cases_of([case], "test") == []


def test_the_gap_is_said_in_words_with_its_direction() -> None:
    from phenoforge.dashboard.decomposition import gap_sentence

    assert gap_sentence(-0.3153) == "Decomposition scores 0.315 higher than searching the cohort name"
    assert gap_sentence(0.05) == "Decomposition scores 0.050 lower than searching the cohort name"
    assert "the same" in gap_sentence(0.0001)


def test_a_set_whose_library_is_missing_says_what_to_load() -> None:
    from phenoforge.dashboard.decomposition import missing_cases_hint

    hint = missing_cases_hint("ohdsi", [c for c in OHDSI_TEST_CASES][:3])
    assert "python -m phenoforge library fetch-ohdsi" in hint and "'ohdsi' cases need" in hint


def test_a_case_title_says_the_difference_in_words() -> None:
    from phenoforge.dashboard.decomposition import case_label

    assert case_label("elix-HF", "heart failure", -0.3).endswith("decomposition 0.300 higher")
    assert case_label("elix-HTN", "high blood pressure", 0.127).endswith("decomposition 0.127 lower")

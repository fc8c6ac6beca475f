"""Cohort drilldown: deep links, side-by-side codes, and the numbers the package computes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge.app_state import BenchmarkParameters
from phenoforge.dashboard.benchmark import run_and_save
from phenoforge.dashboard.drilldown import cohort_drilldown, hierarchy_nodes
from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import ancestor_chain_ids
from phenoforge.eval.harness import match_scores, run_benchmark
from phenoforge.eval.metrics import distance_weighted_score, tree_distance
from tests.dashboard.conftest import frame_with, shown
from tests.dashboard.fixture_data import LIBRARY_DIR


def _page(app: Callable[[str], AppTest], **params: str) -> AppTest:
    at = app("pages/2_Cohort_drilldown.py")
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception
    return at


def test_deep_link_shows_the_cohort_and_method(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    at = _page(app, library="ohdsi-fixture", cohort="503", method="bm25")
    assert at.selectbox(key="dd_cohort_ohdsi-fixture").value == "503"
    assert at.multiselect(key="dd_methods").value == ["bm25"]
    (expected,) = run_benchmark(dash_con, dash / "libraries" / LIBRARY_DIR, ["503"], methods=["bm25"], k=25).results
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Coverage"] == f"{expected.coverage:.3f}"
    assert metrics["Over-inclusion"] == f"{expected.over_inclusion_penalty:.3f}"
    assert metrics["Hierarchical"] == f"{expected.hierarchical_score:.3f}"
    view = cohort_drilldown(dash_con, expected)
    curated = frame_with(at, "best_match")  # the predicted table comes first
    predicted_rows = [r for r in view.rows if r.status != "curated only"]
    assert list(curated["code"]) == [r.code for r in predicted_rows]
    for row in view.rows:
        if row.best_match and row.status != "in both":
            # the row's credit is the one the report counted: the same nearest-match function
            other = expected.ground_truth_codes if row.status == "predicted only" else expected.predicted_codes
            assert [row.partial_credit] == match_scores(dash_con, [row.code], other)
            assert row.partial_credit == distance_weighted_score(row.tree_distance)
            chain_a, chain_b = ancestor_chain_ids(dash_con, row.code), ancestor_chain_ids(dash_con, row.best_match)
            assert row.tree_distance <= tree_distance(chain_a, chain_b)  # never longer than the first-LCA walk
    curated_side = [r for r in view.rows if r.status != "predicted only"]
    assert {r.code for r in curated_side} == set(expected.ground_truth_codes)
    assert len(at.get("plotly_chart")) == 2  # histogram and sunburst
    nodes = hierarchy_nodes(dash_con, view)
    assert "chapter:4" in nodes.ids and f"code:{expected.ground_truth_codes[0]}" in nodes.ids


def test_changing_method_updates_the_url(app: Callable[[str], AppTest]) -> None:
    at = _page(app, library="ohdsi-fixture", cohort="519", method="bm25")
    at.multiselect(key="dd_methods").set_value(["bm25", "expand_descendants"]).run()
    assert not at.exception
    assert at.query_params["method"] == "bm25,expand_descendants"
    assert at.query_params["cohort"] == "519"
    assert [shown(h.value) for h in at.subheader] == ["Heart failure · bm25", "Heart failure · expand_descendants"]


def test_saved_run_link_uses_the_run_and_its_means(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    library = load_library(dash / "libraries" / LIBRARY_DIR)
    run = run_and_save(
        dash_con, library, BenchmarkParameters(methods=["bm25"], k=5, dense_weight=0.5, cohort_ids=library.cohort_ids)
    )
    at = _page(app, library="ohdsi-fixture", cohort="521", method="bm25", run=run.run_id)
    result = next(r for r in run.report.results if r.cohort_id == "521")
    metrics = {m.label: m for m in at.metric}
    assert metrics["Hierarchical"].value == f"{result.hierarchical_score:.3f}"
    mean = run.report.mean_hierarchical_score_by_method["bm25"]
    assert metrics["Hierarchical"].proto.delta == f"{result.hierarchical_score - mean:+.3f} vs mean"
    assert any(run.run_id in c.value for c in at.caption)


def test_unknown_run_id_falls_back_with_a_message(app: Callable[[str], AppTest]) -> None:
    at = _page(app, library="ohdsi-fixture", cohort="521", method="bm25", run="nope")
    assert any("no saved benchmark run" in w.value for w in at.warning)
    assert [shown(h.value) for h in at.subheader] == ["Asthma · bm25"]
    assert "run" not in at.query_params


@pytest.mark.parametrize("cohort", ["999", ""])
def test_unknown_cohort_in_the_link_picks_the_first(app: Callable[[str], AppTest], cohort: str) -> None:
    at = _page(app, library="ohdsi-fixture", cohort=cohort, method="bm25")
    assert at.selectbox(key="dd_cohort_ohdsi-fixture").value == "503"


def test_unknown_cohort_in_the_link_is_named_in_a_notice(app: Callable[[str], AppTest]) -> None:
    """Issue 12 item 8: an invalid cohort in a deep link never shows another cohort silently."""
    at = _page(app, library="ohdsi-fixture", cohort="999", method="bm25")
    notices = [w.value for w in at.warning if "999" in w.value]
    assert len(notices) == 1 and "does not have" in notices[0] and "showing '503'" in notices[0]


def test_unknown_library_in_the_link_is_named_in_a_notice(app: Callable[[str], AppTest]) -> None:
    at = _page(app, library="**no-such-library**", cohort="503", method="bm25")
    notices = [w.value for w in at.warning if "is not installed" in w.value]
    assert len(notices) == 1
    assert "'\\*\\*no\\-such\\-library\\*\\*'" in notices[0]  # escaped: shown as typed, not as Markdown


def test_a_valid_link_has_no_notice(app: Callable[[str], AppTest]) -> None:
    at = _page(app, library="ohdsi-fixture", cohort="503", method="bm25")
    assert not [w.value for w in at.warning if "The link asks" in w.value]


def test_a_set_builder_drilldown_says_why_each_code_is_in_the_list(app: Callable[[str], AppTest]) -> None:
    """Issue 9: the drilldown names the hit or subtree that put each of a set builder's codes there."""
    at = _page(app, library="ohdsi-fixture", cohort="519", method="subtree")
    assert at.multiselect(key="dd_methods").value == ["subtree"]
    predicted = frame_with(at, "why")
    assert len(predicted) > 0
    for code, why in zip(predicted["code"], predicted["why"], strict=True):
        assert len(why) > 0 and " via " in why[0], (code, why)

"""Cohort drilldown: deep links, side-by-side codes, and the numbers the package computes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge.app_state import BenchmarkParameters
from phenoforge.dashboard.benchmark import run_and_save
from phenoforge.dashboard.drilldown import cohort_drilldown, hierarchy_nodes, outcome_text
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
    table = frame_with(at, "outcome")  # one table per method, both sides
    assert list(table["code"]) == [r.code for r in view.rows]
    assert list(table["outcome"]) == [outcome_text(r) for r in view.rows]
    assert not table.isna().any().any()  # no cell reads None
    detail = frame_with(at, "best match")
    assert list(detail["code"]) == [r.code for r in view.rows]
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
    table = frame_with(at, "why in the list")
    predicted = table[table["in"] != "curated"]
    assert len(predicted) > 0
    for code, why in zip(predicted["code"], predicted["why in the list"], strict=True):
        assert " via " in why, (code, why)
    detail = frame_with(at, "why in the list (all)")
    assert all(" via " in why for why in detail[detail["code"].isin(predicted["code"])]["why in the list (all)"])


def _view(counts: dict[str, dict[str, int]]):  # type: ignore[no-untyped-def]
    from phenoforge.dashboard.drilldown import DrilldownView

    return DrilldownView(
        cohort_id="1",
        cohort_name="c",
        method="m",
        coverage=0,
        over_inclusion=0,
        hierarchical=0,
        rows=[],
        distance_counts=counts,
    )


def test_the_histogram_axis_is_numeric_with_no_common_ancestor_last() -> None:
    from phenoforge.dashboard.drilldown import NO_ANCESTOR, distance_bins

    bins = distance_bins(_view({"a": {"0": 2, "5": 1, NO_ANCESTOR: 3, "7": 1}, "b": {"6": 4}}))
    assert bins.ticktext == ["0", "1", "2", "3", "4", "5", "6", "7", NO_ANCESTOR]
    assert bins.x == sorted(bins.x) and bins.x[-1] > bins.x[-2] + 1
    assert bins.counts["a"] == [2, 0, 0, 0, 0, 1, 0, 1, 3] and bins.counts["b"][6] == 4


def test_outcomes_and_reasons_read_as_words() -> None:
    from phenoforge.dashboard.drilldown import CodeRow, short_why

    near = CodeRow(
        code="I50.9",
        name="n",
        status="predicted only",
        outcome="near miss",
        best_match="I50.1",
        best_match_name=None,
        tree_distance=2,
        partial_credit=0.5,
    )
    assert outcome_text(near) == "near miss at distance 2"
    assert (
        short_why([]) == ""
        and short_why(["x" * 100, "y"]).endswith("… (+1 more)")
        and len(short_why(["x" * 100])) == 30
    )


def test_the_outcome_counts_read_as_a_sentence() -> None:
    from phenoforge.dashboard.drilldown import outcome_sentence

    text = outcome_sentence({"hit": 33, "near miss": 16, "miss": 1, "over-inclusion": 20})
    assert text.startswith("33 hits, 16 near misses, 1 miss, 20 over-included")

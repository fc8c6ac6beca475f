"""Benchmark page: a live run shows exactly what the package computes, is saved, and reopens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge import app_state
from phenoforge.dashboard.benchmark import (
    SummaryRow,
    best_cells,
    default_methods,
    direction_text,
    expert_agreement_text,
    method_summaries,
    p_text,
    report_csv,
    significance,
    summary_notes,
    summary_rows,
    summary_table,
)
from phenoforge.engine.dense import load_dense_if_ready
from phenoforge.eval.harness import run_benchmark
from tests.dashboard.conftest import frame_with, shown
from tests.dashboard.fixture_data import LIBRARY_DIR
from tests.engine.fake_embedder import FakeEmbedder

COHORTS = ["503", "519", "521", "563"]


def _run_page(app: Callable[[str], AppTest]) -> AppTest:
    at = app("pages/1_Benchmark.py").run()
    assert not at.exception
    at.multiselect(key="bench_cohorts_ohdsi-fixture").set_value(COHORTS)
    at.multiselect(key="bench_methods").set_value(["bm25", "hybrid", "dense"])
    at.number_input(key="bench_k").set_value(10)
    at.slider(key="bench_weight").set_value(0.3)
    at.button[0].click().run()
    assert not at.exception
    return at


def test_run_shows_the_package_numbers(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    at = _run_page(app)
    dense = load_dense_if_ready(dash_con, index_dir=dash / "dense", embed_fn=FakeEmbedder())
    expected = run_benchmark(
        dash_con,
        dash / "libraries" / LIBRARY_DIR,
        COHORTS,
        methods=["bm25", "hybrid", "dense"],
        dense=dense,
        k=10,
        dense_weight=0.3,
    )
    frame = frame_with(at, "Exact F1")
    methods = [m.removeprefix("★ ") for m in frame["method"]]
    rows = summary_rows(expected, "bm25")
    assert methods == [r.method for r in rows]  # best first on the hierarchical score
    assert list(frame["Hierarchical"]) == sorted(frame["Hierarchical"], reverse=True)
    summary = frame.assign(method=methods).set_index("method")
    for s in method_summaries(expected, baseline="bm25"):
        assert summary.loc[s.method, "Hierarchical"] == pytest.approx(s.mean_hierarchical)
        assert summary.loc[s.method, "Coverage"] == pytest.approx(s.mean_coverage)
        assert summary.loc[s.method, "Precision"] == pytest.approx(s.mean_precision)
        assert summary.loc[s.method, "Exact F1"] == pytest.approx(s.mean_exact_f1)
    assert summary.loc["bm25", "vs bm25 (Hierarchical), 95% CI"] == "the baseline"
    assert "over-inclusion" not in [c.lower() for c in frame.columns]
    tests = frame_with(at, "p (Holm)").set_index("method")
    for c in significance(expected, "bm25"):
        assert tests.loc[c.method_b, "p (Holm)"] == p_text(c.p_holm)
        assert "too few cohorts" in tests.loc[c.method_b, "verdict"]  # 4 cohorts cannot tell
        assert "too few cohorts" in summary.loc[c.method_b, "vs bm25 (Hierarchical), 95% CI"]
    table = frame_with(at, "drilldown")
    assert len(table) == len(expected.results) == 12
    by_key = {(r.cohort_id, r.method): r for r in expected.results}
    for row in table.itertuples():
        result = by_key[(row.cohort.split(" · ")[0], row.method)]
        assert row.hierarchical == pytest.approx(result.hierarchical_score)
        assert row.precision == pytest.approx(1.0 - result.over_inclusion_penalty)
        assert row.drilldown.startswith("/Cohort_drilldown?library=ohdsi-fixture&cohort=")
    runs = app_state.list_benchmark_runs()
    assert len(runs) == 1
    saved = app_state.load_benchmark_run(runs[0].run_id)
    assert saved.report == expected
    assert saved.parameters.k == 10 and saved.parameters.dense_weight == 0.3
    assert saved.vocabulary_release == "phenoforge test fixture"
    csv_button = at.get("download_button")[0]
    assert csv_button.proto.label == "Download CSV"
    assert report_csv(saved.report).count("\n") == 13


def test_the_csv_download_keeps_each_codes_provenance(app: Callable[[str], AppTest]) -> None:
    """The page's CSV carries what ``run export`` carries: why each predicted code is in the list."""
    import csv
    import io
    import json

    _run_page(app)
    saved = app_state.load_benchmark_run(app_state.list_benchmark_runs()[0].run_id)
    rows = list(csv.DictReader(io.StringIO(report_csv(saved.report), newline="")))
    assert list(rows[0])[-1] == "provenance"
    by_key = {(r.cohort_id, r.method): r for r in saved.report.results}
    for row in rows:
        result = by_key[(row["cohort_id"], row["method"])]
        provenance = json.loads(row["provenance"])
        assert list(provenance) == [c for c in result.predicted_codes if c in result.provenance]
        assert provenance == {code: result.provenance[code] for code in provenance}
    assert any(json.loads(row["provenance"]) for row in rows)  # the fixture's methods do give reasons


def test_baseline_switch_changes_deltas(app: Callable[[str], AppTest]) -> None:
    at = _run_page(app)
    at.selectbox(key="bench_baseline").set_value("hybrid").run()
    frame = frame_with(at, "Exact F1")
    summary = frame.assign(method=[m.removeprefix("★ ") for m in frame["method"]]).set_index("method")
    assert summary.loc["hybrid", "vs hybrid (Hierarchical), 95% CI"] == "the baseline"
    gap = summary.loc["bm25", "Hierarchical"] - summary.loc["hybrid", "Hierarchical"]
    assert summary.loc["bm25", "vs hybrid (Hierarchical), 95% CI"].startswith(direction_text(gap))
    tests = frame_with(at, "p (Holm)")
    assert set(tests["method"]) == {"bm25", "dense"}


def test_runs_survive_a_restart_and_compare(app: Callable[[str], AppTest]) -> None:
    first = _run_page(app)
    first_id = app_state.list_benchmark_runs()[0].run_id
    del first
    at = app("pages/1_Benchmark.py").run()  # a new session: nothing in session state
    assert not at.exception
    assert not any(h.value.startswith("Run ") for h in at.subheader)
    at.selectbox(key="bench_reopen").set_value(first_id).run()
    assert any(h.value == f"Run {first_id}" for h in at.subheader)
    at.multiselect(key="bench_methods").set_value(["bm25"])
    at.button[0].click().run()
    second_id = app_state.list_benchmark_runs()[0].run_id
    assert second_id != first_id
    at.multiselect(key="bench_compare").set_value([first_id, second_id]).run()
    compare = frame_with(at, "run_id")
    assert list(compare["run_id"]) == [first_id] * 3 + [second_id]
    expected = app_state.compare_benchmark_runs([first_id, second_id])
    assert list(compare["mean_hierarchical"]) == pytest.approx([r.mean_hierarchical for r in expected])


def test_no_method_chosen_says_so(app: Callable[[str], AppTest]) -> None:
    at = app("pages/1_Benchmark.py").run()
    at.multiselect(key="bench_methods").set_value([])
    at.button[0].click().run()
    assert not at.exception
    assert any("Choose at least one method" in w.value for w in at.warning)
    assert app_state.list_benchmark_runs() == []


def test_a_module_function_method_runs_from_the_page_when_the_server_allows_it(app, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PHENOFORGE_DASHBOARD_USER_METHODS", "1")
    at = app("pages/1_Benchmark.py")
    at.run()
    at.multiselect(key="bench_methods").set_value(["bm25"])
    at.text_input(key="bench_custom").set_value("tests.methods.plugin_methods:top_category")
    at.button[0].click().run()
    assert not at.exception
    from phenoforge import app_state

    (saved,) = app_state.list_benchmark_runs()
    report = app_state.load_benchmark_run(saved.run_id).report
    spec = "tests.methods.plugin_methods:top_category"
    mine = [r for r in report.results if r.method == spec]
    assert mine and all(len(r.predicted_codes) <= 1 for r in mine)
    assert report.methods[spec].source == spec


def test_a_bad_module_function_says_so_on_the_page(app, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PHENOFORGE_DASHBOARD_USER_METHODS", "1")
    at = app("pages/1_Benchmark.py")
    at.run()
    at.text_input(key="bench_custom").set_value("no_such_module_xyz:f")
    at.button[0].click().run()
    assert not at.exception
    assert any("cannot import module" in e.value for e in at.error)


def test_the_cohort_scatter_links_legend_and_brush(dash_con: duckdb.DuckDBPyConnection, dash: Path) -> None:
    from phenoforge.dashboard.benchmark import coverage_precision_chart

    report = run_benchmark(dash_con, dash / "libraries" / LIBRARY_DIR, COHORTS, methods=["bm25", "expand_descendants"])
    spec = coverage_precision_chart(report).to_dict()
    _scatter, listing = spec["vconcat"]
    params = {p["name"]: p for p in spec["params"]}
    assert any(p.get("bind") == "legend" for p in params.values())  # click a method in the legend
    assert any(p["select"]["type"] == "interval" for p in params.values())  # brush a region
    filters = [t["filter"] for t in listing["transform"] if "filter" in t]
    assert {"param": next(n for n, p in params.items() if p["select"]["type"] == "interval")} in filters
    assert len(spec["data"]["values"]) == len(report.results)


def test_the_expert_agreement_line_is_shown_beside_the_means(
    app: Callable[[str], AppTest], dash_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phenoforge.dashboard import benchmark as service
    from phenoforge.eval.agreement import LibraryAgreement

    line = LibraryAgreement(library_id="ohdsi-fixture", n_pairs=3, mean_hierarchical_score=0.777, mean_exact_f1=0.5)
    monkeypatch.setattr(service, "agreement_lines", lambda con, libraries: {"ohdsi-fixture": line})
    service._AGREEMENT.clear()
    at = _run_page(app)
    assert any("Expert agreement: 0.777 hierarchical" in shown(i.value) for i in at.info)
    assert any("over 3 pairs of cohorts" in shown(i.value) for i in at.info)


def test_sorting_by_another_measure_reorders_the_summary_and_marks_its_best(app: Callable[[str], AppTest]) -> None:
    at = _run_page(app)
    at.selectbox(key="bench_sort_by").set_value("coverage").run()
    assert not at.exception
    frame = frame_with(at, "Exact F1")
    assert list(frame["Coverage"]) == sorted(frame["Coverage"], reverse=True)
    assert frame["method"].iloc[0].startswith("★ ")
    assert "vs bm25 (Coverage), 95% CI" in frame.columns
    starred = frame[frame["method"].str.startswith("★ ")]
    assert set(starred["Coverage"]) == {frame["Coverage"].max()}


def _row(method: str, hierarchical: float, coverage: float) -> SummaryRow:
    means = {"hierarchical": hierarchical, "coverage": coverage, "precision": 0.5, "exact_f1": 0.1}
    return SummaryRow(method=method, n_cohorts=3, means=means, cis={}, best_at=[], vs_baseline="", note="")


def test_the_summary_marks_the_best_method_of_each_measure(dash: Path, dash_con: duckdb.DuckDBPyConnection) -> None:
    report = run_benchmark(dash_con, dash / "libraries" / LIBRARY_DIR, COHORTS, methods=["bm25", "expand_descendants"])
    rows = summary_rows(report, "bm25", "precision", n_resamples=200)
    assert [r.means["precision"] for r in rows] == sorted((r.means["precision"] for r in rows), reverse=True)
    for measure, label in (("hierarchical", "Hierarchical"), ("precision", "Precision")):
        best = max(r.means[measure] for r in rows)
        assert {r.method for r in rows if label in r.best_at} == {r.method for r in rows if r.means[measure] == best}
    table = summary_table(rows, "bm25", "precision")
    assert any(str(t["method"]).endswith("expand_descendants †") for t in table)  # marked on the table itself
    assert any(n.startswith("† expand_descendants: starts from a curated code") for n in summary_notes(rows))
    cells = best_cells(rows)
    for index, row in enumerate(rows):
        assert {label for i, label in cells if i == index} == set(row.best_at)


def test_differences_and_p_values_are_in_words() -> None:
    assert direction_text(0.3153) == "0.315 higher"
    assert direction_text(-0.0412) == "0.041 lower"
    assert direction_text(0.00001) == "the same (to 3 decimals)"
    assert p_text(0.0) == "p < 0.001" and p_text(0.0421) == "p = 0.042"


def test_the_expert_line_counts_pairs_and_says_who_is_above_it() -> None:
    from phenoforge.eval.agreement import LibraryAgreement

    line = LibraryAgreement(library_id="q", n_pairs=26, mean_hierarchical_score=0.730, mean_exact_f1=0.4)
    text = expert_agreement_text(line, [_row("curated_transfer", 0.734, 0.5), _row("bm25", 0.4, 0.3)])
    assert "26 pairs of cohorts" in text and "26 cohorts" not in text
    assert "Above it: curated_transfer (0.734)" in text and "not a ceiling" in text
    assert "bm25" not in text


def test_every_built_in_method_is_selected_by_default() -> None:
    options = [
        "bm25",
        "dense",
        "hybrid",
        "expand_descendants",
        "adaptive_cutoff",
        "curated_transfer",
        "learned",
        "subtree",
        "someone_elses_plugin",
    ]
    chosen = default_methods(options)
    assert {"curated_transfer", "subtree", "bm25", "hybrid"} <= set(chosen)
    assert "someone_elses_plugin" not in chosen


def test_an_unfinished_run_is_listed_as_such_and_reopening_it_says_why(app: Callable[[str], AppTest]) -> None:
    """A run whose writer stopped (killed, crashed) is listed as unfinished, left out of the comparison and,
    reopened, says how many results were stored instead of showing a report with results missing."""
    writer = app_state.BenchmarkRunWriter(
        app_state.BenchmarkParameters(methods=["bm25"], k=10, dense_weight=0.5, cohort_ids=COHORTS),
        "ohdsi-fixture",
        "/x",
        "rel",
        "b1",
    )  # begun, never finished
    at = app("pages/1_Benchmark.py").run()
    assert not at.exception
    reopen = at.selectbox(key="bench_reopen")
    assert any("ohdsi-fixture · unfinished: 0 results stored" in str(o) for o in reopen.options), reopen.options
    assert not any("unfinished" in str(o) for o in at.multiselect(key="bench_compare").options)
    reopen.set_value(writer.run_id).run()
    assert not at.exception
    assert any("did not finish: 0 result(s) were stored" in w.value for w in at.warning)
    assert not any(h.value.startswith("Run ") for h in at.subheader)


def test_a_reopened_run_shows_the_held_out_pairs_and_its_degraded_set_builders(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    """The near-copy guard's pairs (which, how many, why) and an untrained set builder's warning, on the page."""
    from phenoforge.eval.models import CopyHoldout, CopyPair

    report = run_benchmark(dash_con, dash / "libraries" / LIBRARY_DIR, COHORTS[:2], methods=["bm25"])
    holdout = CopyHoldout(
        threshold=0.8,
        systemic_share=0.5,
        scored_cohorts=2,
        pairs=[
            CopyPair(
                scored_cohort="503", library_id="cms-hcc-v28-x", cohort_id="v28-HCC1", jaccard=0.91, groups=["cms-hcc"]
            )
        ],
    )
    report.methods["bm25"] = report.methods["bm25"].model_copy(
        update={"held_out": holdout, "degraded": "no bundled library to fit on: untuned defaults"}
    )
    report = type(report).model_validate_json(report.model_dump_json())  # as saved: status from degraded
    assert report.methods["bm25"].status.startswith("degraded: ")
    parameters = app_state.BenchmarkParameters(methods=["bm25"], k=10, dense_weight=0.5, cohort_ids=COHORTS[:2])
    run_id = app_state.save_benchmark_run(report, parameters, "ohdsi-fixture", "/x", "rel", "b1", "2026-12-07T00:00:00")
    at = app("pages/1_Benchmark.py").run()
    at.selectbox(key="bench_reopen").set_value(run_id).run()
    assert not at.exception
    assert any("bm25: degraded: no bundled library to fit on" in shown(w.value) for w in at.warning)
    guard = [shown(i.value) for i in at.info if i.value.startswith("Near-copy guard")]
    assert guard and "1 bundled cohort(s) held out" in guard[0] and "Jaccard >= 0.8" in guard[0], guard
    pairs = frame_with(at, "bundled cohort")
    assert list(pairs["scored cohort"]) == ["503"] and list(pairs["held out"]) == ["this cohort"]
    assert list(pairs["Jaccard"]) == [0.91]

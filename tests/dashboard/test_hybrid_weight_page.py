"""Hybrid weight: the slider re-fuses cached rankings and the numbers follow rescore_hybrid."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge.dashboard.weights import cohort_shifts
from phenoforge.engine.dense import load_dense_if_ready
from phenoforge.eval.harness import collect_rankings, rescore_hybrid, run_benchmark
from phenoforge.eval.sweep import sweep_library
from tests.dashboard.conftest import frame_with, shown
from tests.dashboard.fixture_data import FIXTURE_COHORTS, LIBRARY_DIR
from tests.engine.fake_embedder import FakeEmbedder


def test_slider_moves_the_numbers(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    at = app("pages/3_Hybrid_weight.py").run()
    assert not at.exception
    at.number_input(key="hw_k").set_value(5).run()
    dense = load_dense_if_ready(dash_con, index_dir=dash / "dense", embed_fn=FakeEmbedder())
    library_dir = dash / "libraries" / LIBRARY_DIR
    cohorts = list(FIXTURE_COHORTS)
    cache = collect_rankings(dash_con, library_dir, cohorts, dense=dense, depth=100)
    seen = []
    for weight in (0.0, 0.35):
        at.slider(key="hw_weight").set_value(weight).run()
        assert not at.exception
        expected = rescore_hybrid(dash_con, cache, weight, k=5)
        direct = run_benchmark(
            dash_con, library_dir, cohorts, methods=["hybrid"], dense=dense, k=5, dense_weight=weight
        )
        assert expected.mean_hierarchical_score_by_method == pytest.approx(direct.mean_hierarchical_score_by_method)
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Mean hierarchical"] == (f"{expected.mean_hierarchical_score_by_method['hybrid']:.3f}")
        assert metrics["Mean coverage"] == f"{expected.mean_coverage_by_method['hybrid']:.3f}"
        shifts = cohort_shifts(rescore_hybrid(dash_con, cache, 0.0, k=5), expected)
        losing = [s for s in shifts if s.delta < -1e-12][::-1][:8]
        if losing:
            table = frame_with(at, "BM25 only")
            assert list(table["cohort"]) == [s.cohort_id for s in losing]
            assert list(table["Δ"]) == pytest.approx([s.delta for s in losing])
        else:
            assert any(c.value == "none at this weight" for c in at.caption)
        seen.append(metrics["Mean hierarchical"])
    assert seen[0] != seen[1]


def test_without_dense_the_page_waits(
    app: Callable[[str], AppTest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dash: Path
) -> None:
    import dashboard_ui

    monkeypatch.setattr(dashboard_ui, "dense_retriever", lambda: None)
    at = app("pages/3_Hybrid_weight.py").run()
    assert not at.exception
    assert any("needs the dense index" in i.value for i in at.info)
    assert not at.slider


def test_a_set_builder_is_swept_with_in_sample_beside_cross_validated(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    """The page sweeps a set builder on demand and shows exactly what ``sweep_library`` (the CLI's path) gives."""
    at = app("pages/3_Hybrid_weight.py").run()
    assert not at.exception
    assert at.selectbox(key="hw_method").value == "hybrid"  # the default is the slider, unchanged
    at.selectbox(key="hw_method").set_value("subtree").run()
    assert not at.exception
    assert not at.slider and not at.metric  # nothing runs before the button
    at.multiselect(key="hw_sweep_weights").set_value([0.0, 0.5, 1.0]).run()
    at.number_input(key="hw_folds").set_value(2).run()
    at.button(key="hw_run_sweep").click().run()
    assert not at.exception

    dense = load_dense_if_ready(dash_con, index_dir=dash / "dense", embed_fn=FakeEmbedder())
    expected = sweep_library(
        dash_con, dash / "libraries" / LIBRARY_DIR, "subtree", [0.0, 0.5, 1.0], dense, list(FIXTURE_COHORTS), n_folds=2
    )
    assert expected.choice is not None
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["In-sample best hierarchical"] == f"{expected.choice.in_sample_score:.3f}"
    assert metrics["Cross-validated hierarchical"] == f"{expected.choice.out_of_sample_score:.3f}"
    assert any("2 folds: chosen on the other folds" in c.value for c in at.caption)
    table = frame_with(at, "in_sample_best")
    assert list(table["dense_weight"]) == [0.0, 0.5, 1.0]
    assert list(table["hierarchical"]) == pytest.approx([row.hierarchical_score for row in expected.rows])
    assert list(table["in_sample_best"]).count(True) == 1

    at.selectbox(key="hw_method").set_value("hybrid").run()  # back to the slider
    assert not at.exception and at.slider


@pytest.fixture
def mixed_library_app(dashboard_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The fixture data plus a library whose second cohort lists only codes the vocabulary lacks."""
    import shutil

    import streamlit as st

    from tests.dashboard.fixture_data import dashboard_env, fit_set_builders
    from tests.fixture_library import write_icd_library

    data = tmp_path / "data"
    shutil.copytree(dashboard_data, data, ignore=shutil.ignore_patterns("app_state.sqlite*"))
    write_icd_library(
        data / "libraries" / "mixed",
        {"hf": ("Heart failure", ["I50.9"], False), "gone": ("Unknown condition", ["Q98.111"], False)},
        "mixed",
    )
    fit_set_builders(data)  # a library added: the first-run build fits for it before a page offers the builders
    for key, value in dashboard_env(data).items():
        monkeypatch.setenv(key, value)
    st.cache_resource.clear()
    at = AppTest.from_file(str(Path(__file__).parents[2] / "pages/3_Hybrid_weight.py"), default_timeout=60).run()
    assert not at.exception
    at.selectbox(key="hw_library").set_value("mixed").run()
    assert not at.exception
    return at


def test_the_slider_names_a_cohort_it_cannot_score(mixed_library_app: AppTest) -> None:
    """Means over one of two cohorts say so, and a choice of only the unscorable one is not a silent 0.0000."""
    at = mixed_library_app
    assert {m.label: m.value for m in at.metric}["Mean coverage"] == "1.000"  # hf alone: its one code found
    assert [e.label for e in at.expander] == ["1 cohort(s) not scored (the means leave them out)"]
    assert "gone/*: no resolvable ground-truth codes" in shown(at.expander[0].markdown[0].value)

    at.multiselect(key="hw_cohorts_mixed").set_value(["gone"]).run()
    assert not at.exception
    assert not at.metric  # no zeros that look like a score
    assert "gone/*: no resolvable ground-truth codes" in shown(at.warning[0].value)


def test_a_sweep_of_only_unscorable_cohorts_says_so(mixed_library_app: AppTest) -> None:
    at = mixed_library_app
    at.multiselect(key="hw_cohorts_mixed").set_value(["gone"]).run()
    at.selectbox(key="hw_method").set_value("subtree").run()
    at.button(key="hw_run_sweep").click().run()
    assert not at.exception  # was KeyError: 'dense_weight' on an empty table
    assert "gone/*: no resolvable ground-truth codes" in shown(at.warning[0].value)
    assert not at.metric


def test_deltas_and_notes_read_plainly() -> None:
    from phenoforge.dashboard.weights import readable_note
    from phenoforge.dashboard.wording import delta_text

    assert delta_text(0.00001, "vs BM25 only") is None  # no red "up +0.0000" at weight 0
    assert delta_text(-0.0123, "vs BM25 only") == "-0.012 vs BM25 only"
    note = "subtree: fitted bundle 3f9a0c2b7d1e4a5f6b8c, {'threshold': 0.4123456789}"
    assert readable_note(note) == "subtree: fitted bundle …, {'threshold': 0.412}"


def test_the_slider_shows_no_delta_at_the_reference_weight(app: Callable[[str], AppTest]) -> None:
    at = app("pages/3_Hybrid_weight.py").run()
    at.slider(key="hw_weight").set_value(0.0).run()
    assert not at.exception
    assert all(m.delta is None or m.delta == "" for m in at.metric)

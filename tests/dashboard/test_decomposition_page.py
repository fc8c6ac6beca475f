"""Decomposition: the offline decomposer over the runnable cases, numbers as the package has them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge.agent.offline import offline_decomposer
from phenoforge.engine.dense import load_dense_if_ready
from phenoforge.eval.decomposition import OHDSI_TEST_CASES, score_decomposition
from tests.dashboard.conftest import frame_with
from tests.dashboard.fixture_data import FIXTURE_COHORTS
from tests.engine.fake_embedder import FakeEmbedder


def test_offline_run_matches_score_decomposition(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    at = app("pages/4_Decomposition.py").run()
    assert not at.exception
    assert at.selectbox(key="dec_set").value == "ohdsi"  # the only set runnable on the fixture
    assert at.radio(key="dec_decomposer").options == ["offline"]  # no key set
    at.button(key="dec_run").click().run()
    assert not at.exception
    cases = [c for c in OHDSI_TEST_CASES if c.cohort_id in FIXTURE_COHORTS]
    dense = load_dense_if_ready(dash_con, index_dir=dash / "dense", embed_fn=FakeEmbedder())
    expected = score_decomposition(
        dash_con, dash / "libraries", offline_decomposer(), dense=dense, k=10, test_cases=cases
    )
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Mean gap (baseline − decomposed)"] == f"{expected.mean_gap:+.4f}"
    assert metrics["Mean decomposed"] == f"{expected.mean_decomposed_hierarchical_score:.4f}"
    assert metrics["Cases scored"] == str(expected.n_scored) == str(len(cases))
    table = frame_with(at, "seed terms")
    assert list(table["cohort"]) == [r.cohort_id for r in expected.results]
    assert list(table["gap"]) == pytest.approx([r.gap for r in expected.results])
    assert list(table["seed terms"]) == ["; ".join(r.seed_terms) for r in expected.results]
    assert len(at.expander) == len(cases)

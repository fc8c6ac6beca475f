"""Home: what is loaded, the leaderboard, and the first-run build."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge.app_state import BenchmarkParameters
from phenoforge.dashboard import resources
from phenoforge.dashboard.benchmark import import_run_and_save, leaderboard, run_and_save
from phenoforge.engine.curated import load_library
from phenoforge.engine.db import vocabulary_info
from phenoforge.engine.dense.store import DenseIndexStatus
from tests.dashboard.conftest import shown
from tests.dashboard.fixture_data import LIBRARY_DIR, LIBRARY_ID
from tests.fixture_vocab import build_fixture_vocab


def _texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for kind in (at.success, at.info, at.warning, at.error) for e in kind]
    parts += [f"{m.label}={m.value}" for m in at.metric]
    return "\n".join(str(p) for p in parts)


def test_home_shows_what_is_loaded(app: Callable[[str], AppTest], dash_con: duckdb.DuckDBPyConnection) -> None:
    at = app("app.py").run()
    assert not at.exception
    info = vocabulary_info(dash_con)
    metrics = {m.label: m.value for m in at.metric}
    assert any(m.value == f"**{info.vocabulary_release}** · source `fixture`" for m in at.markdown)
    assert info.vocabulary_release == "phenoforge test fixture"
    assert metrics["Cohort libraries"] == "1"
    assert metrics["ICD-10-CM concepts"] == f"{info.n_icd10cm:,}"
    assert metrics["Billable codes"] == f"{info.n_billable:,}"
    libraries = at.dataframe[0].value
    assert list(libraries["library"]) == [LIBRARY_ID]
    assert int(libraries["cohorts"].iloc[0]) == 6
    assert any("phenoforge tests, version 1 (CC0)" in shown(c.value) for c in at.caption)  # in full, not cut
    text = _texts(at)
    assert "Dense index: ready" in text
    assert "Claude API key: not set" in text
    assert "No library has been benchmarked over all its cohorts yet." in text
    links = {link.proto.label: link.proto.page for link in at.get("page_link")}  # start here
    assert links["Benchmark a library"] == "Benchmark"
    assert links["Build a list from a description"] == "Assemble"
    assert not any("ompare" in label for label in links)  # no link to a compare page that does not exist


def test_home_headline_is_the_latest_full_run_not_the_latest_upload(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    library = load_library(dash / "libraries" / LIBRARY_DIR)
    params = BenchmarkParameters(
        methods=["bm25", "expand_descendants"], k=10, dense_weight=0.5, cohort_ids=library.cohort_ids
    )
    run = run_and_save(dash_con, library, params)
    subset = BenchmarkParameters(methods=["dense"], k=10, dense_weight=0.5, cohort_ids=library.cohort_ids[:2])
    run_and_save(dash_con, library, subset)  # newer, but over 2 of 6 cohorts
    import_run_and_save(dash_con, library, b"cohort_id,code\n503,E11.9\n", "upload.csv", ["bm25"])
    at = app("app.py").run()
    assert not at.exception
    board = at.dataframe[0].value
    best = leaderboard(run.report)
    assert list(board["library"]) == [LIBRARY_ID]
    assert list(board["finished"]) == [run.finished_at[:10]]
    assert board["best method"].iloc[0] == best[0]["method"]
    assert board["hierarchical"].iloc[0] == pytest.approx(best[0]["hierarchical"])
    assert board["next best"].iloc[0] == best[1]["method"]
    assert board["lead"].iloc[0].endswith("ahead")


def test_first_run_builds_vocabulary_and_dense_index(
    app: Callable[[str], AppTest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty data directory: Home builds the vocabulary with progress, then the dense index
    in the background (the fake embedder), while the page keeps working."""
    empty = tmp_path / "fresh"
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(empty))
    monkeypatch.setenv("PHENOFORGE_DENSE_AUTOBUILD", "1")
    calls: list[tuple[int, int, str]] = []

    def fake_build(progress=None):  # type: ignore[no-untyped-def]
        for step in range(3):
            progress(step, 3, f"step {step}")
            calls.append((step, 3, f"step {step}"))
        return build_fixture_vocab(empty / "vocab.duckdb")

    monkeypatch.setattr(resources, "build_vocabulary", fake_build)
    at = app("app.py").run()
    assert not at.exception
    assert len(calls) == 3
    assert any("phenoforge test fixture" in m.value for m in at.markdown)
    assert not (empty / "libraries").exists()  # a fixture vocabulary never gets bundled libraries
    import dashboard_ui

    state = dashboard_ui.dense_manager().wait(timeout=60)
    assert state.state == "ready"
    at.run()
    assert "Dense index: ready" in _texts(at)
    assert state.message.startswith("dense index ready (") and state.message in _texts(at)  # codes, how embedded
    assert (empty / "dense" / "manifest.json").exists()
    # then the set builders, in the background too, with that index; Home says when every method is ready
    assert dashboard_ui.set_builder_fits().wait(timeout=60).state == "ready"
    at.run()
    text = _texts(at)
    assert "Set builders: ready (" in text and "**All methods ready** (first-run build: " in text
    assert "Vocabulary: ready (ready after " in text and "Dense index: ready (ready after " in text
    assert any(p.name.startswith("fitted-") for p in (empty / "models").iterdir())


def test_home_says_every_method_is_ready_when_everything_is_built(app: Callable[[str], AppTest]) -> None:
    at = app("app.py").run()
    assert not at.exception
    text = _texts(at)
    for step in ("Vocabulary: ready", "Cohort libraries: ready (1)", "Dense index: ready", "Set builders: ready ("):
        assert step in text
    assert "**All methods ready**." in text  # nothing was built by this process: no first-run time
    assert "ready after" not in text


def test_home_shows_the_set_builders_being_fitted_and_what_works_meanwhile(
    app: Callable[[str], AppTest], monkeypatch: pytest.MonkeyPatch
) -> None:
    from phenoforge.dashboard.first_run import FitState, SetBuilderFits

    fitting = FitState(state="fitting", done=1, total=4, fraction=0.4, step="the membership model", seconds=20)
    monkeypatch.setattr(SetBuilderFits, "status", lambda self: fitting)
    monkeypatch.setattr(SetBuilderFits, "start", lambda self: False)
    at = app("app.py").run()
    assert not at.exception
    assert "All methods ready" not in _texts(at)
    assert any("Ready now: bm25, dense, hybrid, expand_descendants." in str(c.value) for c in at.caption)
    bars = at.get("progress")
    assert bars and "set builders: 1/4 fits · the membership model · 20 s" in bars[-1].proto.text


@pytest.mark.parametrize(("runtime", "noted"), [("torch-bf16", True), ("onnx-fp32", False)])
def test_a_ready_index_built_in_bf16_is_noted_on_home(runtime: str, noted: bool) -> None:
    # Home said "Dense index: ready" and nothing else for an index built in bf16 before auto became fp32
    status = DenseIndexStatus(state="ready", count=3, mode="composed", search="exact", runtime=runtime)
    state = resources._ready_state(SimpleNamespace(status=status))
    assert state.state == "ready" and runtime in state.message
    assert (state.note is not None and "build --force" in state.note) is noted


def test_home_lists_the_files_under_data_by_their_descriptions(app: Callable[[str], AppTest]) -> None:
    from phenoforge.artifacts import ARTIFACTS

    at = app("app.py").run()
    assert not at.exception
    (table,) = [frame.value for frame in at.dataframe if "kind" in frame.value.columns]
    assert list(table["kind"]) == [artifact.kind for artifact in ARTIFACTS]  # every described kind, in one place
    counts = dict(zip(table["kind"], table["count"], strict=True))
    assert counts["vocabulary"] == 1 and counts["cohort libraries"] == 1

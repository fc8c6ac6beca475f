"""Errors a user can cause show a message that says what to do, never a traceback."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.dashboard.conftest import shown


@pytest.fixture
def broken_library(dash: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the fixture data with one library whose manifest is not JSON."""
    data = tmp_path / "data"
    shutil.copytree(dash, data)
    bad = data / "libraries" / "broken"
    bad.mkdir()
    (bad / "manifest.json").write_text("{ not json", encoding="utf-8")
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(data))
    return bad


@pytest.mark.parametrize(
    ("page", "picker"),
    [("app.py", None), ("pages/1_Benchmark.py", "bench_library"), ("pages/3_Hybrid_weight.py", "hw_library")],
)
def test_malformed_library_is_named_and_skipped(
    app: Callable[[str], AppTest], broken_library: Path, page: str, picker: str | None
) -> None:
    """Issue 12 item 7: one broken library is reported and skipped; the others still work."""
    at = app(page).run()
    assert not at.exception
    messages = [shown(m.value) for m in [*at.error, *at.warning]]
    assert any(str(broken_library / "manifest.json") in m and "not valid JSON" in m for m in messages)
    if picker is None:
        count = next(metric.value for metric in at.metric if metric.label == "Cohort libraries")
        assert int(count) >= 1
        assert not any("No cohort library yet" in str(m.value) for m in [*at.info, *at.warning])
    else:
        assert "broken" not in at.selectbox(key=picker).options
        assert len(at.selectbox(key=picker).options) >= 1


def test_missing_vocabulary_points_to_home(
    app: Callable[[str], AppTest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path / "empty"))
    at = app("pages/1_Benchmark.py").run()
    assert not at.exception
    assert any("Open the Home page" in w.value for w in at.warning)
    assert not at.button

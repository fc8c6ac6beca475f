"""Errors a user can cause show a message that says what to do, never a traceback."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest


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


@pytest.mark.parametrize("page", ["app.py", "pages/1_Benchmark.py", "pages/3_Hybrid_weight.py"])
def test_malformed_library_is_a_message(
    app: Callable[[str], AppTest], broken_library: Path, page: str
) -> None:
    at = app(page).run()
    assert not at.exception
    assert any(str(broken_library / "manifest.json") in e.value and "not valid JSON" in e.value
               for e in at.error)


def test_missing_vocabulary_points_to_home(
    app: Callable[[str], AppTest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path / "empty"))
    at = app("pages/1_Benchmark.py").run()
    assert not at.exception
    assert any("Open the Home page" in w.value for w in at.warning)
    assert not at.button

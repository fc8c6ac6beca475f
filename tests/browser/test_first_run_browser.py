"""Issue 31, target 2, in a real browser: from a data folder with no dense index and no fitted set builder to
"All methods ready" on Home, two sessions opened at once watching one build; then Benchmark offers every method.

The fixture vocabulary and library stand in for the embedded release (its real build and fits take minutes);
the dense index is built by a slowed fake embedder, so the progress is there to be seen.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from phenoforge.setbuild.builders import builder_names
from tests.browser import support as web
from tests.dashboard.fixture_data import build_dashboard_data

pytestmark = [pytest.mark.browser, web.requires_browser]

FIRST_RUN_ENV = {
    "PHENOFORGE_DENSE_AUTOBUILD": "1",
    "PHENOFORGE_EMBEDDER": "tests.engine.fake_embedder:SlowFakeEmbedder",
}


def _save(driver: object, name: str) -> Path:
    """A screenshot in screenshots/ and a copy under /tmp to look at."""
    path = web.shot(driver, name)
    shutil.copy(path, Path("/tmp") / path.name)
    return path


def test_two_sessions_watch_one_first_run_build_until_every_method_is_ready(tmp_path: Path) -> None:
    data = build_dashboard_data(tmp_path / "data", dense=False, fitted=False)
    assert not (data / "dense").exists() and not (data / "models").exists()
    server = web.start_server(data, tmp_path / "streamlit.log", FIRST_RUN_ENV)
    first = web.make_driver(tmp_path / "profile-1")
    second = web.make_driver(tmp_path / "profile-2")
    try:
        started = time.monotonic()
        first.get(server.url)
        second.get(server.url)
        web.wait_text(first, "First-run build", "dense index:", timeout=120)  # the build's progress bar
        web.wait_text(second, "First-run build", "dense index:")  # the same build, seen from the other session
        _save(first, "first-run-building")
        web.wait_text(first, "All methods ready", timeout=120)
        web.wait_text(second, "All methods ready", timeout=60)
        elapsed = time.monotonic() - started
        web.no_exception(first)
        web.no_exception(second)
        _save(second, "first-run-ready")
        text = web.body(first)
        for step in ("Vocabulary: ready", "Cohort libraries: ready (1)", "Dense index: ready", "Set builders: ready"):
            assert step in text
        assert "(first-run build: " in text and elapsed < 120
        assert "Dense index: ready (ready after " in text  # built by this run, timed
        assert "Vocabulary: ready (ready after" not in text  # there before it: not timed as if built
        assert (data / "dense" / "manifest.json").exists()
        assert len(list((data / "models").glob("fitted-*.json"))) == 2  # one per library group, one on all
        log = (tmp_path / "streamlit.log").read_text()
        assert "Traceback" not in log, log[-3000:]

        first.get(f"{server.url}/Benchmark")
        web.wait_text(first, "Methods", "Run benchmark")
        web.wait_idle(first)
        page = web.body(first)
        assert "still being fitted" not in page and "not fitted yet" not in page
        assert {name for name in builder_names() if name in page} == set(builder_names())  # offered by default
    finally:
        first.quit()
        second.quit()
        server.stop()

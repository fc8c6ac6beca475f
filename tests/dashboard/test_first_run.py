"""Issue 31, target 2: the set builders are fitted by the first-run build Home shows, never behind a page's
button; a page offers the methods that are ready and says what is still being fitted."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import duckdb
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from phenoforge.config import REPO_ROOT
from phenoforge.dashboard import first_run
from phenoforge.dashboard.first_run import (
    LOCK_NAME,
    PROGRESS_NAME,
    READ_SHARE,
    FitTally,
    SetBuilderFits,
    fits_stored,
)
from phenoforge.dashboard.resources import CursorPool
from phenoforge.engine.dense import load_dense_if_ready
from phenoforge.eval.harness import run_benchmark
from phenoforge.setbuild.api import FitRefused, fit_builders, fits_refused
from phenoforge.setbuild.builders import builder_names
from tests.dashboard.conftest import shown
from tests.dashboard.fixture_data import LIBRARY_DIR, build_dashboard_data, dashboard_env
from tests.engine.fake_embedder import FakeEmbedder


class ReadyDense:
    """A dense index manager whose index is ready (the fits are keyed by it)."""

    def __init__(self, retriever: object) -> None:
        self._retriever = retriever

    def status(self) -> Any:
        return SimpleNamespace(state="ready")

    def retriever(self) -> object:
        return self._retriever


class SwitchedDense:
    """A dense index manager whose state the test sets."""

    def __init__(self, state: str) -> None:
        self.state = state

    def status(self) -> Any:
        return SimpleNamespace(state=self.state)

    def retriever(self) -> object:
        return None


@pytest.fixture
def unfitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, CursorPool, ReadyDense]]:
    """Fixture vocabulary, library and dense index; no set builder fitted yet."""
    data = build_dashboard_data(tmp_path / "data", fitted=False)
    for key, value in dashboard_env(data).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(first_run, "RECHECK_SECONDS", 0.0)
    monkeypatch.setattr(first_run, "READY_RECHECK_SECONDS", 0.0)
    con = duckdb.connect(str(data / "vocab.duckdb"), read_only=True)
    dense = load_dense_if_ready(con, index_dir=data / "dense", embed_fn=FakeEmbedder())
    assert dense is not None
    yield data, CursorPool(con), ReadyDense(dense)
    con.close()


def _fit_files(data: Path) -> list[str]:
    return sorted(p.name for p in (data / "models").glob("fitted-*.json"))


def test_the_fits_run_in_the_background_with_progress_every_session_sees(
    unfitted: tuple[Path, CursorPool, ReadyDense],
) -> None:
    """The fit on every library first (Assemble may use it at once), then the library's held-out one."""
    from phenoforge.engine.curated import load_library

    data, pool, dense = unfitted
    library = load_library(data / "libraries" / LIBRARY_DIR)
    release = threading.Event()
    calls: list[str | None] = []

    def slow_fit(con, dense_, held, libraries, progress, also_held_out=()):  # type: ignore[no-untyped-def]
        calls.append(held)
        if held is not None:  # the second fit waits for the test
            progress(1, 2, f"set builders without {held}: step 1")
            progress(0, 6, "ohdsi-fixture 503")  # a training library's cohorts, counted from 0: not a step back
            assert release.wait(30)
        return fit_builders(con, dense_, held, libraries, progress, also_held_out)

    fits = SetBuilderFits(pool, dense, models_dir=data / "models", fit=slow_fit)
    assert fits.status().state == "missing" and not fits.ready_for(None) and not fits.ready_for(library)
    assert fits.start() is True
    assert fits.start() is False  # one fitting per process
    deadline = time.monotonic() + 30
    reading = "set builders without ohdsi-fixture: reading training cohorts (ohdsi-fixture 503)"
    while fits.status().step != reading and time.monotonic() < deadline:
        time.sleep(0.05)
    seen: list[Any] = []
    other = threading.Thread(target=lambda: seen.append(fits.status()))  # a second session's script thread
    other.start()
    other.join()
    state = fits.status()
    assert state.state == "fitting" and seen[0].state == "fitting"
    assert (state.done, state.total) == (1, 2) and seen[0].total == 2  # one on all, one per library group
    # fit 1 of 2 half through its stages (0.75 of the stages), all of the reading done by then
    assert state.fraction == pytest.approx(READ_SHARE * 1.0 + (1 - READ_SHARE) * 0.75)
    assert seen[0].step == state.step == reading
    assert state.seconds > 0 and state.remaining is not None
    assert f"1/2 fits · {reading}" in state.progress_text()
    assert (data / "models" / PROGRESS_NAME).exists()  # for another process
    assert fits.ready_for(None) and not fits.ready_for(library)  # a description can be built already
    release.set()
    final = fits.wait(30)
    assert final.state == "ready" and final.fraction == 1.0 and final.seconds > 0
    assert calls == [None, "ohdsi-fixture"] and fits.ready_for(library)
    assert len(_fit_files(data)) == 2 and not (data / "models" / PROGRESS_NAME).exists()
    assert fits.start() is False  # ready: nothing to start


def test_a_failed_fit_says_so_and_a_retry_fits(unfitted: tuple[Path, CursorPool, ReadyDense]) -> None:
    data, pool, dense = unfitted
    broken = [True]

    def flaky(con, dense_, held, libraries, progress, also_held_out=()):  # type: ignore[no-untyped-def]
        if broken[0]:
            raise RuntimeError("the trees would not grow")
        return fit_builders(con, dense_, held, libraries, progress, also_held_out)

    fits = SetBuilderFits(pool, dense, models_dir=data / "models", fit=flaky)
    fits.start()
    state = fits.wait(30)
    assert state.state == "failed"
    assert state.error is not None and "RuntimeError: the trees would not grow" in state.error
    assert "BM25, dense and hybrid still work" in state.error and "retry from Home" in state.error
    assert fits.status().state == "failed"  # stays said until a retry
    broken[0] = False
    assert fits.start() is True
    assert fits.wait(30).state == "ready"


def test_a_full_disk_is_named_and_nothing_half_stored_is_ready(
    unfitted: tuple[Path, CursorPool, ReadyDense],
) -> None:
    data, pool, dense = unfitted

    def disk_full(con, dense_, held, libraries, progress, also_held_out=()):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device")

    fits = SetBuilderFits(pool, dense, models_dir=data / "models", fit=disk_full)
    fits.start()
    state = fits.wait(30)
    assert state.state == "failed" and state.error is not None and "the disk is full" in state.error

    def unstored(con, dense_, held, libraries, progress, also_held_out=()):  # type: ignore[no-untyped-def]
        # what fit_builders answers when data/models cannot take the bundle: fitted, with a note, nothing on disk
        note = "fitted-0123.json not stored (No space left on device): fitted for this run only"
        return SimpleNamespace(notes=[note])

    fits = SetBuilderFits(pool, dense, models_dir=data / "models", fit=unstored)
    fits.start()
    state = fits.wait(30)
    assert state.state == "failed" and state.error is not None
    assert "not every fit could be stored" in state.error and "No space left on device" in state.error
    assert _fit_files(data) == []


def test_a_fit_killed_halfway_is_fitted_again_not_served(unfitted: tuple[Path, CursorPool, ReadyDense]) -> None:
    """A process killed before a bundle's rename leaves its models and a temporary, never a bundle: the next
    run is not ready until it has fitted again, and the killed writer's temporary goes."""
    data, pool, dense = unfitted
    fits = SetBuilderFits(pool, dense, models_dir=data / "models")
    fits.start()
    assert fits.wait(30).state == "ready"
    for bundle in (data / "models").glob("fitted-*.json"):
        bundle.unlink()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    leftover = data / "models" / f".fitted-0123456789abcdef.json.{int(dead.stdout)}.0a1b2c3d.tmp"
    leftover.write_text('{"signature": "half')
    again = SetBuilderFits(pool, dense, models_dir=data / "models")
    assert again.status().state == "missing"
    assert again.start() is True
    assert again.wait(30).state == "ready"
    assert len(_fit_files(data)) == 2 and not leftover.exists()


def test_a_second_process_waits_with_the_first_ones_progress_then_takes_over(
    unfitted: tuple[Path, CursorPool, ReadyDense],
) -> None:
    """Two dashboards on one empty data folder: one fits, the other shows its progress and fits nothing; when
    the first is killed halfway the lock goes with it and the second fits."""
    data, pool, dense = unfitted
    models = data / "models"
    models.mkdir(exist_ok=True)
    holder = f"""
import fcntl, json, os, sys, time
handle = open({str(models / LOCK_NAME)!r}, "w")
fcntl.flock(handle, fcntl.LOCK_EX)
progress = dict(pid=os.getpid(), started=time.time() - 12, done=1, total=4, fraction=0.4,
                step="set builders without cms-hcc: the membership model")
open({str(models / PROGRESS_NAME)!r}, "w").write(json.dumps(progress))
print("holding", flush=True)
time.sleep(120)
"""
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "holding"
        calls: list[str | None] = []

        def counted(con, dense_, held, libraries, progress, also_held_out=()):  # type: ignore[no-untyped-def]
            calls.append(held)
            return fit_builders(con, dense_, held, libraries, progress, also_held_out)

        fits = SetBuilderFits(pool, dense, models_dir=models, fit=counted)
        state = fits.status()
        assert state.state == "fitting" and state.elsewhere and state.percent == 40
        assert state.step == "set builders without cms-hcc: the membership model" and state.seconds >= 12
        assert "in another phenoforge process" in state.progress_text()
        assert fits.start() is True
        time.sleep(1.0)  # the thread polls the other process's lock; nothing may be fitted meanwhile
        waiting = fits.status()
        assert waiting.state == "fitting" and waiting.elsewhere and waiting.done == 1 and calls == []
        process.send_signal(signal.SIGKILL)  # killed halfway: its lock goes with it, its progress file stays
        process.wait(10)
        assert fits.wait(30).state == "ready"
        assert calls == [None, "ohdsi-fixture"] and len(_fit_files(data)) == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_a_stale_progress_file_of_a_killed_process_is_not_shown(
    unfitted: tuple[Path, CursorPool, ReadyDense],
) -> None:
    data, pool, dense = unfitted
    (data / "models").mkdir(exist_ok=True)
    (data / "models" / PROGRESS_NAME).write_text(
        f'{{"pid": {os.getpid()}, "started": 0, "done": 1, "total": 4, "fraction": 0.3, "step": "x"}}'
    )
    assert SetBuilderFits(pool, dense, models_dir=data / "models").status().state == "missing"


def test_the_fits_wait_for_the_dense_index_then_follow_it(unfitted: tuple[Path, CursorPool, ReadyDense]) -> None:
    data, pool, ready = unfitted
    dense = SwitchedDense("building")
    fits = SetBuilderFits(pool, dense, models_dir=data / "models", dense_autobuild=lambda: True)
    assert fits.status().state == "waiting" and "dense index" in fits.status().message
    assert fits.start() is True  # waits in its thread, with no page open
    time.sleep(0.3)
    assert fits.status().state == "waiting" and _fit_files(data) == []
    dense.state = "failed"  # no dense index coming: fitted without, as the pages then run the builders
    assert fits.wait(30).state == "ready"
    con = pool.con.cursor()
    assert fits_stored(con, None) and not fits_stored(con, ready.retriever())  # keyed by the index


def test_once_the_dense_index_is_ready_the_look_for_stored_fits_is_not_called_waiting(
    unfitted: tuple[Path, CursorPool, ReadyDense], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Looking for stored fits takes seconds on real data; the fits said "waits for the dense index" meanwhile."""
    data, pool, _ready = unfitted
    dense = SwitchedDense("building")
    fits = SetBuilderFits(pool, dense, models_dir=data / "models", dense_autobuild=lambda: True)
    looking = threading.Event()
    release = threading.Event()
    stored = fits._stored

    def slow_stored(found_dense: object | None) -> bool:
        looking.set()
        release.wait(10)
        return stored(found_dense)

    monkeypatch.setattr(fits, "_stored", slow_stored)
    assert fits.start() is True
    dense.state = "failed"
    assert looking.wait(10)
    try:
        state = fits.status()
        assert state.state == "fitting" and state.step == "looking for fits stored before"
    finally:
        release.set()
    assert fits.wait(30).state == "ready"


# -- pages never start a fit -------------------------------------------------------------------------------------


@pytest.fixture
def no_fit_app(
    unfitted: tuple[Path, CursorPool, ReadyDense], monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], AppTest]:
    """Pages over data whose set builders are not fitted; any fit a page's action started raises."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a page started a fit of the set builders")

    monkeypatch.setattr("phenoforge.setbuild.api._library_examples_cached", refuse)
    monkeypatch.setattr("phenoforge.setbuild.api._fit_examples_only", refuse)
    monkeypatch.setattr("phenoforge.setbuild.api._fit_one", refuse)
    st.cache_resource.clear()
    st.cache_data.clear()

    def make(page: str) -> AppTest:
        return AppTest.from_file(str(REPO_ROOT / page), default_timeout=60)

    return make


def _said(at: AppTest) -> str:
    return "\n".join(str(e.value) for kind in (at.info, at.warning, at.error, at.success) for e in kind)


def test_benchmark_offers_what_is_ready_and_runs_it_without_fitting(no_fit_app: Callable[[str], AppTest]) -> None:
    at = no_fit_app("pages/1_Benchmark.py").run()
    assert not at.exception
    assert "The set builders are not fitted yet: open Home" in _said(at)
    offered = at.multiselect(key="bench_methods").options
    assert {"bm25", "dense", "hybrid"} <= set(offered) and not set(builder_names()) & set(offered)
    at.multiselect(key="bench_cohorts_ohdsi-fixture").set_value(["503", "519"])
    at.button[0].click().run()  # every default method
    assert not at.exception and not at.error
    assert any("finished and saved" in str(s.value) for s in at.success)


def test_assemble_offers_hybrid_only_and_generates_without_fitting(no_fit_app: Callable[[str], AppTest]) -> None:
    at = no_fit_app("pages/6_Assemble.py").run()
    assert not at.exception
    assert at.radio(key="as_generator").options == ["hybrid"]
    assert "the set-builder generators are not offered" in _said(at)
    at.text_area(key="as_description").set_value("heart failure")
    at.button(key="as_start").click().run()
    assert not at.exception and not at.error
    assert at.dataframe  # the seed terms


def test_the_sweep_and_the_drilldown_offer_no_set_builder_until_fitted(no_fit_app: Callable[[str], AppTest]) -> None:
    at = no_fit_app("pages/3_Hybrid_weight.py").run()
    assert not at.exception
    assert at.selectbox(key="hw_method").options == ["hybrid"]
    assert "set-builder sweeps are not offered" in _said(at)
    at = no_fit_app("pages/2_Cohort_drilldown.py")
    at.query_params.update({"library": "ohdsi-fixture", "cohort": "519", "method": "subtree"})
    at.run()
    assert not at.exception
    assert "subtree" not in at.multiselect(key="dd_methods").options
    assert at.multiselect(key="dd_methods").value != ["subtree"]


def _page_that_fits() -> None:
    """A page whose action asks for a fit (as a plug-in method or a new page could): run as the pages are."""
    import dashboard_ui as ui
    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.setbuild.api import fit_builders
    from tests.engine.fake_embedder import FakeEmbedder

    def main() -> None:
        with ui.cursor() as con:
            dense = load_dense_if_ready(con, embed_fn=FakeEmbedder())
            fit_builders(con, dense, None, None)
        st.success("fitted")

    ui.run_page(main)


def test_a_page_that_asks_for_a_fit_gets_the_refusal_not_a_fit(no_fit_app: Callable[[str], AppTest]) -> None:
    at = AppTest.from_function(_page_that_fits, default_timeout=60).run()
    assert not at.exception and not at.success  # the patched fit would have raised: nothing was fitted
    (error,) = at.error
    assert "The set builders are not fitted yet: open Home" in shown(error.value)
    assert "A page never starts a fit" in shown(error.value)


def test_a_set_builder_asked_for_under_the_refusal_is_skipped_saying_why(
    unfitted: tuple[Path, CursorPool, ReadyDense],
) -> None:
    """The guard under every page: a benchmark that asks for a set builder anyway skips it; nothing is fitted."""
    data, pool, dense = unfitted
    con = pool.con.cursor()
    with fits_refused("still being fitted on Home (40%)"):
        report = run_benchmark(
            con, data / "libraries" / LIBRARY_DIR, ["519"], methods=["bm25", "subtree"], dense=dense.retriever()
        )
        with pytest.raises(FitRefused, match="40%"):
            fit_builders(con, dense.retriever(), None, None)
    assert {r.method for r in report.results} == {"bm25"}
    assert any("subtree" in s and "still being fitted on Home (40%)" in s for s in report.skipped)
    assert _fit_files(data) == []
    fit_builders(con, dense.retriever(), None, None)  # outside it, fitted
    with fits_refused("refused"):  # and a stored fit is reused under it
        assert fit_builders(con, dense.retriever(), None, None).notes[0].startswith("reused the builders")


def test_the_refusal_reaches_a_plugin_worker_thread() -> None:
    from phenoforge.methods.guard import guarded
    from phenoforge.setbuild import api

    with fits_refused("no"):
        seen = guarded(lambda: api._FITS_REFUSED.get(), timeout=5.0)
    assert seen == "no" and api._FITS_REFUSED.get() is None


def test_stored_fits_are_looked_at_again_when_a_library_is_added(
    unfitted: tuple[Path, CursorPool, ReadyDense], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found ready, the fits are not re-read on every page run, but a library imported since is noticed at once."""
    from tests.fixture_library import write_icd_library

    data, pool, dense = unfitted
    monkeypatch.setattr(first_run, "READY_RECHECK_SECONDS", 3600.0)
    fits = SetBuilderFits(pool, dense, models_dir=data / "models")
    fits.start()
    assert fits.wait(30).state == "ready"
    reads: list[object] = []
    real = first_run.fits_found
    monkeypatch.setattr(first_run, "fits_found", lambda con, d: reads.append(d) or real(con, d))
    assert fits.status().state == "ready" and reads == []  # from the last look
    write_icd_library(data / "libraries" / "added", {"hf": ("Heart failure", ["I50.9"], False)}, "added")
    assert fits.status().state == "missing" and len(reads) == 1  # its group's fit is not there


def test_the_fitting_fraction_counts_the_libraries_read_and_never_goes_back() -> None:
    """Reading each training library's cohorts restarts its count at 0: the whole stays monotonic and moves."""
    tally = FitTally(4, ["a", "b", "c", "d"])
    seen = [
        tally.report(0, 0, 1, "set builders without x", "without x")[0],
        tally.report(0, 5, 10, "a a-1", "without x")[0],
        tally.report(0, 10, 10, "a a-9", "without x")[0],
        tally.report(0, 0, 10, "b b-1", "without x")[0],  # the next library, counted from 0
        tally.report(0, 10, 10, "b b-9", "without x")[0],
        tally.report(0, 1, 4, "set builders without x: the membership model", "without x")[0],
        tally.report(3, 4, 4, "set builders on every library: fitted", "on every library")[0],
    ]
    assert seen[0] == 0.0 and seen == sorted(seen) and seen[1] > seen[0] and seen[3] == seen[2] and seen[4] > seen[3]
    assert seen[2] == pytest.approx(READ_SHARE * 0.25)  # one library of four read, no stage done
    assert seen[-1] == pytest.approx(1.0)
    assert tally.report(0, 0, 10, "c c-1", "without x")[1] == "set builders without x: reading training cohorts (c c-1)"

"""A plug-in's failure (raising, exiting, a wrong answer type, a hang, an import error) costs only its
own row: the other methods run and score exactly as without it, and the report says what happened."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from phenoforge.eval.harness import run_benchmark
from phenoforge.eval.models import BenchmarkReport
from tests.fixture_library import write_icd_library
from tests.methods import plugin_methods

COHORTS = {
    "dm2": ("Type 2 diabetes mellitus", ["E11"], True),
    "hf": ("Heart failure", ["I50"], True),
}
PLUGINS = "tests.methods.plugin_methods"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_icd_library(tmp_path_factory.mktemp("libs") / "lib", COHORTS, "lib")


@pytest.fixture(scope="module")
def alone(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> BenchmarkReport:
    """The built-ins without any plug-in: what they must still score beside a failing one."""
    return run_benchmark(fixture_con, library, list(COHORTS), methods=["bm25", "hybrid"], k=5)


def _builtin_rows(report: BenchmarkReport) -> list[tuple[str, str, list[str], float]]:
    return [
        (r.method, r.cohort_id, r.predicted_codes, r.hierarchical_score)
        for r in report.results
        if r.method in ("bm25", "hybrid")
    ]


@pytest.mark.parametrize(
    ("plugin", "why"),
    [
        ("returns_int", "answered int, not a list of codes"),
        ("returns_string", "answered str, not a list of codes"),
        ("returns_none", "answered NoneType, not a list of codes"),
        ("exits", "the method raised SystemExit: 3"),
        ("fails_midway", "the method raised ValueError: lost the connection half way"),
        ("non_strings", "item 2 is float, not a code or RunEntry"),
        ("nan_scores", "item 1 has a score that is not a finite number (nan)"),
        ("skips_in_predict", "the method raised SkipMethod: no key"),
        ("raises_unprintable", "the method raised UnprintableError (its message cannot be printed)"),
        ("runaway", "answered more than 200000 codes"),
        ("returns_set", "answered set, not a list of codes"),
    ],
)
def test_a_failing_plugin_costs_only_its_own_row(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, alone: BenchmarkReport, plugin: str, why: str
) -> None:
    spec = f"{PLUGINS}:{plugin}"
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=["bm25", spec, "hybrid"], k=5)
    assert _builtin_rows(report) == _builtin_rows(alone)
    assert [r for r in report.results if r.method == spec] == []
    assert f"dm2/{spec}: {why}" in report.skipped
    assert report.methods[spec].status == f"failed on 2 of 2 cohorts (dm2: {why})"
    assert report.methods["bm25"].status == "ok"


def test_a_failing_setup_is_reported_for_that_method(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, alone: BenchmarkReport
) -> None:
    spec = f"{PLUGINS}:fails_setup"
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=["bm25", spec, "hybrid"], k=5)
    assert _builtin_rows(report) == _builtin_rows(alone)
    assert report.methods[spec].status == "failed: setup raised RuntimeError: no model file"
    assert f"hf/{spec}: setup raised RuntimeError: no model file" in report.skipped


@pytest.fixture()
def broken_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A user's plug-in module that raises while being imported (a missing config file)."""
    module = tmp_path / "plugins" / "broken_on_import.py"
    module.parent.mkdir()
    module.write_text(
        'raise RuntimeError("config file plugin.toml not found")\ndef anything(context, task):\n    return []\n'
    )
    monkeypatch.syspath_prepend(str(module.parent))
    yield "broken_on_import"
    sys.modules.pop("broken_on_import", None)


def test_a_plugin_module_that_fails_to_import_is_reported_for_that_method(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, alone: BenchmarkReport, broken_module: str
) -> None:
    spec = f"{broken_module}:anything"
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=["bm25", spec, "hybrid"], k=5)
    assert _builtin_rows(report) == _builtin_rows(alone)
    expected = f"failed: importing {broken_module} raised RuntimeError: config file plugin.toml not found"
    assert report.methods[spec].status == expected
    assert report.methods[spec].source == spec


@pytest.fixture()
def released() -> Iterator[None]:
    plugin_methods.RELEASE.clear()
    yield
    plugin_methods.RELEASE.set()  # the abandoned worker threads return and end


def test_a_plugin_that_hangs_is_abandoned_after_its_time_limit(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, alone: BenchmarkReport, released: None
) -> None:
    spec = f"{PLUGINS}:blocks"
    started = time.monotonic()
    report = run_benchmark(
        fixture_con, library, list(COHORTS), methods=["bm25", spec, "hybrid"], k=5, method_timeout=0.2
    )
    assert time.monotonic() - started < 60  # the plug-in blocks for 120 s per cohort
    assert _builtin_rows(report) == _builtin_rows(alone)
    assert f"dm2/{spec}: no answer within 0.2 s (abandoned, still running)" in report.skipped
    assert report.methods[spec].status.startswith("failed on 2 of 2 cohorts")


def test_a_plugin_mutating_its_task_cannot_file_its_answer_under_another_cohort(
    fixture_con: duckdb.DuckDBPyConnection, library: Path
) -> None:
    spec = f"{PLUGINS}:mutates_task"
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=[spec], k=5)
    assert {r.cohort_id: r.predicted_codes for r in report.results} == {"dm2": ["E11"], "hf": ["E11"]}
    assert report.methods[spec].status == "ok"


def test_a_keyboard_interrupt_still_stops_the_run(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(fixture_con, library, list(COHORTS), methods=[f"{PLUGINS}:interrupts"], k=5)


def test_a_plugin_setting_the_context_does_not_change_the_methods_after_it(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, alone: BenchmarkReport
) -> None:
    spec = f"{PLUGINS}:narrows_the_context"
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=[spec, "bm25", "hybrid"], k=5)
    assert _builtin_rows(report) == _builtin_rows(alone)


def test_without_a_time_limit_a_failing_plugin_still_costs_only_its_row(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, alone: BenchmarkReport
) -> None:
    """``method_timeout=None`` calls plug-ins in the harness's own thread: the same guard applies."""
    spec = f"{PLUGINS}:exits"
    report = run_benchmark(
        fixture_con, library, list(COHORTS), methods=["bm25", spec, "hybrid"], k=5, method_timeout=None
    )
    assert _builtin_rows(report) == _builtin_rows(alone)
    assert report.methods[spec].status == "failed on 2 of 2 cohorts (dm2: the method raised SystemExit: 3)"
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(fixture_con, library, ["dm2"], methods=[f"{PLUGINS}:interrupts"], method_timeout=None)


@pytest.mark.parametrize("limit", [0, -1, float("nan"), float("inf")])
def test_a_time_limit_is_a_positive_number(fixture_con: duckdb.DuckDBPyConnection, library: Path, limit: float) -> None:
    with pytest.raises(ValueError, match="method_timeout must be a positive number"):
        run_benchmark(fixture_con, library, ["dm2"], methods=["bm25"], method_timeout=limit)

"""The harness's batch hook (``Method.predict_batch``): preferred when given, same answers, and a
plugin's failing batch falls back to one cohort at a time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.curated import load_library
from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import CohortTask, Method, MethodContext, registry
from tests.eval.test_harness import COHORTS
from tests.fixture_library import write_icd_library


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_icd_library(tmp_path_factory.mktemp("libs") / "batch-lib", COHORTS, "batch-lib")


def _by_name(context: MethodContext, task: CohortTask) -> list[str]:
    """A deterministic little answer per cohort name (no retrieval)."""
    return ["E11.9", "I50.9"] if "diabetes" in task.query.lower() else ["J45.909"]


def _report(con: duckdb.DuckDBPyConnection, library: Path, method: Method):  # noqa: ANN202
    return run_benchmark(con, library, load_library(library).cohort_ids, methods=[method])


def _answers(report) -> list[tuple[str, list[str]]]:  # noqa: ANN001
    return [(r.cohort_id, r.predicted_codes) for r in report.results]


def test_the_batch_answers_every_cohort_in_one_call_with_the_same_results(
    fixture_con: duckdb.DuckDBPyConnection, library: Path
) -> None:
    calls: list[int] = []

    def batch(context: MethodContext, tasks: Sequence[CohortTask]) -> list[list[str]]:
        calls.append(len(tasks))
        return [_by_name(context, task) for task in tasks]

    one = Method(name="mine", predict=_by_name, source="plugin", retrieves=False)
    many = Method(name="mine", predict=_by_name, source="plugin", retrieves=False, predict_batch=batch)
    expected = _answers(_report(fixture_con, library, one))
    assert _answers(_report(fixture_con, library, many)) == expected
    assert calls == [len({cohort for cohort, _codes in expected})] and len(expected) > 1  # one call for the run


@pytest.mark.parametrize("broken", ["raises", "short"])
def test_a_plugins_broken_batch_falls_back_to_one_cohort_at_a_time(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, broken: str
) -> None:
    def batch(context: MethodContext, tasks: Sequence[CohortTask]) -> list[list[str]]:
        if broken == "raises":
            raise RuntimeError("batch exploded")
        return [_by_name(context, task) for task in tasks[1:]]  # one answer short

    expected = _answers(_report(fixture_con, library, Method(name="mine", predict=_by_name, source="plugin")))
    report = _report(fixture_con, library, Method(name="mine", predict=_by_name, source="plugin", predict_batch=batch))
    assert _answers(report) == expected
    assert any("predict_batch raised" in note for note in report.methods["mine"].notes)


def test_a_built_in_batch_error_propagates(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def batch(context: MethodContext, tasks: Sequence[CohortTask]) -> list[list[str]]:
        raise RuntimeError("a bug in a built-in")

    # only the registry makes a built-in: this one is put there as phenoforge's own would be
    method = Method(name="mine", predict=_by_name, retrieves=False, predict_batch=batch, source="built-in")
    monkeypatch.setitem(registry._REGISTRY, "mine", method)
    with pytest.raises(RuntimeError, match="a bug in a built-in"):
        run_benchmark(fixture_con, library, load_library(library).cohort_ids, methods=["mine"])


def test_the_context_names_every_method_of_the_run(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    seen: list[tuple[str, ...]] = []

    def predict(context: MethodContext, task: CohortTask) -> list[str]:
        seen.append(context.methods)
        return []

    first = Method(name="first", predict=predict, source="plugin", retrieves=False)
    second = Method(name="second", predict=predict, source="plugin", retrieves=False)
    run_benchmark(fixture_con, library, load_library(library).cohort_ids, methods=[first, second])
    assert seen and set(seen) == {("first", "second")}


def test_methods_run_and_score_with_the_collector_paused(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    """A benchmark makes millions of acyclic objects: the collector's passes over them cost a third of
    the run, so ``run_methods`` pauses it, and turns it back on after."""
    import gc

    seen: list[bool] = []

    def predict(context: MethodContext, task: CohortTask) -> list[str]:
        seen.append(gc.isenabled())
        return _by_name(context, task)

    was = gc.isenabled()
    gc.enable()
    try:
        _report(fixture_con, library, Method(name="mine", predict=predict, source="plugin", retrieves=False))
        assert seen and not any(seen)
        assert gc.isenabled()
    finally:
        if not was:
            gc.disable()

"""The harness answers and scores a run chunk by chunk: the same report as one pass, and with a sink the
results leave as they are scored (none held in the report); ``benchmark --json`` streamed byte for byte."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.curated import load_library
from phenoforge.eval import harness
from phenoforge.eval.harness import run_benchmark, run_methods
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult
from phenoforge.eval.qrels import load_qrels
from phenoforge.eval.report_stream import JsonReportWriter
from phenoforge.eval.runs import Run, RunEntry
from phenoforge.methods import CohortTask, Method, MethodContext
from tests.eval.test_harness import COHORTS
from tests.fixture_library import write_icd_library


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_icd_library(tmp_path_factory.mktemp("libs") / "stream-lib", COHORTS, "stream-lib")


def _fails_on_second(context: MethodContext, task: CohortTask) -> list[str]:
    if task.cohort_id == list(COHORTS)[1]:
        raise RuntimeError("no answer here")
    context.note("flaky", task.cohort_id, "answered")
    return ["E11.9"]


FLAKY = Method(name="flaky", predict=_fails_on_second, source="plugin", retrieves=False)


def _full(con: duckdb.DuckDBPyConnection, library: Path, sink=None) -> BenchmarkReport:  # noqa: ANN001
    qrels = load_qrels(con, library)
    imported = Run(
        name="mine",
        cohorts={cid: [RunEntry(code="I50.9", rank=1)] for cid in list(qrels.cohorts)[::2]},  # every other cohort
        source="mine.csv",
    )
    methods: list[str | Method] = ["bm25", "hybrid", "expand_descendants", FLAKY]
    return run_methods(con, qrels, methods, extra_runs=[imported], sink=sink)


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_a_run_in_chunks_gives_the_one_pass_report(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    expected = _full(fixture_con, library).model_dump()
    assert len(expected["results"]) > chunk * 2 and expected["skipped"], "the fixture must span several chunks"
    monkeypatch.setattr(harness, "RESULT_CHUNK", chunk)
    assert _full(fixture_con, library).model_dump() == expected


def test_with_a_sink_the_results_leave_chunk_by_chunk_and_the_report_holds_none(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _full(fixture_con, library)
    monkeypatch.setattr(harness, "RESULT_CHUNK", 2)
    chunks: list[list[CohortEvalResult]] = []
    streamed = _full(fixture_con, library, sink=chunks.append)
    assert streamed.results == []
    assert [r for chunk in chunks for r in chunk] == expected.results
    scored = len(load_qrels(fixture_con, library).cohorts)
    assert scored > 2 and len(chunks) == -(-scored // 2)  # one hand-over per chunk, not one at the end
    assert streamed.model_dump(exclude={"results"}) == expected.model_dump(exclude={"results"})


def test_a_timed_out_plugin_batch_fails_every_later_chunk_without_asking_again(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phenoforge.methods.guard import MethodTimedOut

    calls: list[int] = []

    def slow_batch(context: MethodContext, tasks: Sequence[CohortTask]) -> list[list[str]]:
        calls.append(len(tasks))
        raise MethodTimedOut("ran past its limit")

    monkeypatch.setattr(harness, "guarded", lambda function, *args, **kwargs: function())
    method = Method(name="slow", predict=_fails_on_second, source="plugin", retrieves=False, predict_batch=slow_batch)
    monkeypatch.setattr(harness, "RESULT_CHUNK", 2)
    report = run_benchmark(fixture_con, library, load_library(library).cohort_ids, methods=[method])
    scored = len(load_qrels(fixture_con, library).cohorts)
    assert calls == [2] and scored > 2
    assert report.methods["slow"].status.startswith(f"failed on {scored} of {scored} cohorts")
    assert report.results == []


def _old_print(reports: dict[str, BenchmarkReport]) -> str:
    """What ``benchmark --json`` printed before it streamed (the whole document built at the end)."""
    dumped = {name: json.dumps(r.model_dump(), indent=1).replace("\n", "\n ") for name, r in reports.items()}
    entries = [f" {json.dumps(name)}: {text}" for name, text in dumped.items()]
    return ("{\n" + ",\n".join(entries) + "\n}" if entries else "{}") + "\n"


def _streamed(reports: dict[str, BenchmarkReport], chunk: int) -> str:
    out = io.StringIO()
    writer = JsonReportWriter(out)
    for name, report in reports.items():
        writer.begin(name)
        for start in range(0, len(report.results), chunk):
            writer.add(report.results[start : start + chunk])
        writer.end(report.model_copy(update={"results": []}))
    writer.close()
    return out.getvalue()


def test_the_streamed_json_is_the_document_printed_before_byte_for_byte(
    fixture_con: duckdb.DuckDBPyConnection, library: Path
) -> None:
    report = _full(fixture_con, library)
    empty = report.model_copy(update={"results": []})
    for reports in ({}, {"a": report}, {"a": report, 'b\u00e9 "q"': empty}, {"e": empty}):
        text = _streamed(reports, chunk=3)
        assert text == _old_print(reports)
        assert json.loads(text) == {name: r.model_dump() for name, r in reports.items()}


def test_a_stream_stopped_halfway_is_no_json_document() -> None:
    """A killed ``benchmark --json`` leaves what no JSON reader takes for a complete report."""
    result = CohortEvalResult(
        cohort_id="c",
        cohort_name="C",
        method="bm25",
        predicted_codes=[],
        ground_truth_codes=["E11.9"],
        coverage=0.0,
        over_inclusion_penalty=0.0,
        hierarchical_score=0.0,
    )
    out = io.StringIO()
    writer = JsonReportWriter(out)
    writer.begin("lib")
    writer.add([result, result])
    with pytest.raises(json.JSONDecodeError):
        json.loads(out.getvalue())
    with pytest.raises(ValueError, match="not ended"):
        writer.close()

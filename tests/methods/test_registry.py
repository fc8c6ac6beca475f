"""The method registry: built-ins, module:function methods, declared needs, and failures."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import MethodError, available_methods, get_method
from tests.fixture_library import write_icd_library

COHORTS = {
    "dm2": ("Type 2 diabetes mellitus", ["E11"], True),
    "hf": ("Heart failure", ["I50"], True),
}


@pytest.fixture()
def library(tmp_path: Path) -> Path:
    return write_icd_library(tmp_path / "lib", COHORTS, "lib")


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    module = tmp_path / "plugins" / "my_methods.py"
    module.parent.mkdir()
    module.write_text(
        textwrap.dedent(
            '''
            from phenoforge.methods import method

            def category_of_top_hit(context, task):
                """The BM25 top hit's category and nothing else."""
                code = context.retrieval.bm25(task.query)[0][0]
                return [code.split(".")[0]]

            @method(label="Needs a key", needs=["anthropic_key"])
            def llm_lists(context, task):
                return ["E11.9"]

            def broken(context, task):
                raise RuntimeError("model fell over")

            not_a_function = 42
            '''
        )
    )
    monkeypatch.syspath_prepend(str(module.parent))
    yield "my_methods"
    sys.modules.pop("my_methods", None)


def test_builtins_are_registered_in_reference_order() -> None:
    names = list(available_methods(include_entry_points=False))
    assert names[:4] == ["bm25", "dense", "hybrid", "expand_descendants"]
    assert get_method("dense").needs == {"dense"} and get_method("hybrid").uses == {"dense"}


def test_a_module_function_method_runs_and_is_recorded(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, plugin: str
) -> None:
    spec = f"{plugin}:category_of_top_hit"
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=["bm25", spec], k=5)
    mine = {r.cohort_id: r for r in report.results if r.method == spec}
    assert mine["dm2"].predicted_codes == ["E11"] and mine["hf"].predicted_codes == ["I50"]
    assert report.methods[spec].source == spec
    assert report.methods[spec].label == spec


def test_unmet_needs_skip_with_the_reason(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    spec = f"{plugin}:llm_lists"
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=[spec])
    assert report.results == []
    assert f"dm2/{spec}: no Anthropic API key (ANTHROPIC_API_KEY)" in report.skipped
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert {r.method for r in run_benchmark(fixture_con, library, ["dm2"], methods=[spec]).results} == {spec}


def test_a_raising_user_method_is_reported_not_fatal(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, plugin: str
) -> None:
    spec = f"{plugin}:broken"
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=["bm25", spec])
    assert {r.method for r in report.results} == {"bm25"}
    assert f"dm2/{spec}: the method raised RuntimeError: model fell over" in report.skipped


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "unknown method 'nope'"),
        ("no_such_module_xyz:f", "cannot import module"),
        ("my_methods:missing", "has no 'missing'"),
        ("my_methods:not_a_function", "is not a function"),
        (":f", "module:function"),
    ],
)
def test_bad_method_names_say_what_is_wrong(plugin: str, spec: str, message: str) -> None:
    with pytest.raises(MethodError, match=message):
        get_method(spec)


def test_hybrid_without_dense_is_marked_degraded(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    report = run_benchmark(
        fixture_con, library, list(COHORTS), methods=["hybrid", "dense"], dense_problem="corrupt (checksum mismatch)"
    )
    assert report.methods["hybrid"].degraded == "no dense retriever (corrupt (checksum mismatch))"
    assert report.methods["dense"].notes == ["skipped: no dense retriever (corrupt (checksum mismatch))"]
    payload = report.model_dump()
    assert payload["methods"]["hybrid"]["degraded"]


def test_methods_never_see_the_curated_set(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []
    module = tmp_path / "spy" / "spy_methods.py"
    module.parent.mkdir()
    module.write_text("SEEN = []\ndef spy(context, task):\n    SEEN.append(task)\n    return []\n")
    monkeypatch.syspath_prepend(str(module.parent))
    run_benchmark(fixture_con, library, ["dm2"], methods=["spy_methods:spy"])
    import spy_methods  # type: ignore[import-not-found]  # written by this test

    seen = spy_methods.SEEN
    assert [set(task.model_dump()) for task in seen] == [{"cohort_id", "query", "seed_code"}]
    sys.modules.pop("spy_methods", None)


def test_entry_point_methods_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from phenoforge.methods import registry

    point = importlib.metadata.EntryPoint(
        name="top_category", value="tests.methods.plugin_methods:top_category", group=registry.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group=None: [point] if group == registry.ENTRY_POINT_GROUP else []
    )
    found = get_method("top_category")
    assert found.source == "entry point: tests.methods.plugin_methods:top_category"
    assert "top_category" in available_methods()
    broken = importlib.metadata.EntryPoint(
        name="broken", value="no_such_module_xyz:f", group=registry.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [broken])
    with pytest.raises(MethodError, match="entry point 'broken'"):
        available_methods()

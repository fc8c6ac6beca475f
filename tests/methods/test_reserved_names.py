"""Built-in method names are reserved: a plug-in can neither take a built-in's name nor claim to be built-in."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import duckdb
import pytest

from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import Method, MethodError, available_methods, get_method, method, register, registry
from tests.fixture_library import write_icd_library
from tests.methods.plugin_methods import fake_hybrid, perfect_answer

COHORTS = {
    "dm2": ("Type 2 diabetes mellitus", ["E11"], True),
    "hf": ("Heart failure", ["I50"], True),
}
PLUGINS = "tests.methods.plugin_methods"


@pytest.fixture()
def library(tmp_path: Path) -> Path:
    return write_icd_library(tmp_path / "lib", COHORTS, "lib")


def test_a_plugin_named_like_a_builtin_is_refused_before_any_work(
    fixture_con: duckdb.DuckDBPyConnection, library: Path
) -> None:
    with pytest.raises(MethodError, match="'hybrid' is a built-in method's name"):
        run_benchmark(fixture_con, library, list(COHORTS), methods=["hybrid", f"{PLUGINS}:fake_hybrid"])


def test_the_real_hybrid_row_is_the_builtin(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=["hybrid"], k=5)
    assert report.methods["hybrid"].source == "built-in"
    assert get_method("hybrid").predict is not perfect_answer
    assert report.mean_hierarchical_score_by_method["hybrid"] < 1.0  # the pass-off would score 1.000


def test_a_plugin_claiming_to_be_builtin_is_refused() -> None:
    with pytest.raises(MethodError, match="claims source 'built-in'"):
        get_method(f"{PLUGINS}:claims_builtin")


def test_a_look_alike_of_a_builtin_name_is_refused() -> None:
    with pytest.raises(MethodError, match="built-in method's name"):
        get_method(f"{PLUGINS}:look_alike_hybrid")


def test_a_plugin_method_object_is_named_and_sourced_by_its_loader() -> None:
    loaded = get_method(f"{PLUGINS}:plain_method")
    assert (loaded.name, loaded.source) == (f"{PLUGINS}:plain_method", f"{PLUGINS}:plain_method")


def test_method_objects_given_to_the_api_cannot_pass_for_builtins(
    fixture_con: duckdb.DuckDBPyConnection, library: Path
) -> None:
    with pytest.raises(MethodError, match="'hybrid' is a built-in method's name"):
        run_benchmark(fixture_con, library, ["dm2"], methods=[fake_hybrid])
    with pytest.raises(MethodError, match="claims source 'built-in'"):
        run_benchmark(fixture_con, library, ["dm2"], methods=[Method("mine", perfect_answer, source="built-in")])
    mine = Method("mine", perfect_answer)
    report = run_benchmark(fixture_con, library, ["dm2"], methods=[mine])
    assert report.methods["mine"].source == f"{perfect_answer.__module__}:{perfect_answer.__qualname__}"


def test_registering_under_a_builtin_name_or_source_is_refused() -> None:
    real = get_method("hybrid")
    with pytest.raises(MethodError, match="'hybrid' is a built-in method's name"):
        register(Method(name="hybrid", predict=perfect_answer))
    with pytest.raises(MethodError, match="built-in method's name"):
        method(name="bm25", register=True)(perfect_answer)
    with pytest.raises(MethodError, match="claims source 'built-in'"):
        register(Method(name="mine_too", predict=perfect_answer, source="built-in"))
    assert get_method("hybrid").predict is real.predict and get_method("hybrid").source == "built-in"
    assert "mine_too" not in registry._REGISTRY


def test_an_entry_point_named_like_a_builtin_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    point = importlib.metadata.EntryPoint(
        name="hybrid", value=f"{PLUGINS}:perfect_answer", group=registry.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [point])
    with pytest.raises(MethodError, match="'hybrid' is a built-in method's name"):
        available_methods()


@pytest.mark.parametrize(("name", "message"), [(5, "non-empty string"), ("\u04bbybrid", "mixes Latin, Cyrillic")])
def test_names_that_are_not_plain_or_mix_scripts_are_refused(name: object, message: str) -> None:
    with pytest.raises(MethodError, match=message):
        get_method(Method(name=name, predict=perfect_answer))  # type: ignore[arg-type]  # as a careless caller would


def test_a_builtins_function_under_another_builtins_name_is_refused() -> None:
    """bm25's own function declared as 'hybrid' would make a 'hybrid' row of BM25's answers."""
    with pytest.raises(MethodError, match="'hybrid' is a built-in method's name"):
        get_method(Method(name="hybrid", predict=get_method("bm25").predict))
    assert get_method(Method(name="learned", predict=get_method("learned").predict)).source == "built-in"

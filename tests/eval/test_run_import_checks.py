"""What a run file may not do: repeat a rank or a JSON key, or be named like another row."""

from __future__ import annotations

import json

import duckdb
import pytest

from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.errors import PhenoforgeError
from phenoforge.eval.harness import run_methods
from phenoforge.eval.qrels import Qrels
from phenoforge.eval.runs import Run, RunEntry, RunImportError, parse_run_csv, parse_run_json
from tests.eval.test_run_round_trip import qrels  # noqa: F401  # the fixture library's curated sets

__all__ = ["qrels"]


@pytest.fixture(scope="module")
def hierarchy(fixture_con: duckdb.DuckDBPyConnection) -> Hierarchy:
    return get_hierarchy(fixture_con)


def test_a_rank_given_twice_in_a_cohort_is_refused(qrels: Qrels, hierarchy: Hierarchy) -> None:
    text = "cohort_id,code,rank\ndm2,E11.9,1\ndm2,E11.65,2\ndm2,E11.21,2\nhf,I50.9,2\n"
    with pytest.raises(RunImportError, match="line 4: rank 2 is given twice for cohort 'dm2'"):
        parse_run_csv(text, qrels, hierarchy, "mine")
    json_text = '{"cohorts": {"hf": [{"code": "I50.9", "rank": 1}, {"code": "I50.21", "rank": 1}]}}'
    with pytest.raises(RunImportError, match="entry 2: rank 1 is given twice for cohort 'hf'"):
        parse_run_json(json_text, qrels, hierarchy, "mine")


def test_the_same_row_twice_still_counts_once(qrels: Qrels, hierarchy: Hierarchy) -> None:
    run = parse_run_csv("cohort_id,code,rank\ndm2,E11.9,1\ndm2,E11.9,1\n", qrels, hierarchy, "mine")
    assert [e.code for e in run.cohorts["dm2"]] == ["E11.9"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"cohorts": {"dm2": ["E11.9"], "hf": ["I50.9"], "dm2": ["E11.65"]}}', "dm2"),
        ('{"cohorts": {"dm2": [{"code": "E11.9", "code": "E11.65"}]}}', "code"),
        ('{"cohorts": {"dm2": ["E11.9"]}, "cohorts": {"hf": ["I50.9"]}}', "cohorts"),
    ],
)
def test_a_json_key_given_twice_is_refused(qrels: Qrels, hierarchy: Hierarchy, text: str, key: str) -> None:
    with pytest.raises(RunImportError, match=f"key '{key}' is given twice"):
        parse_run_json(text, qrels, hierarchy, "mine")


@pytest.mark.parametrize("name", ["hybrid ", "hybrid\u200b", "\u202ehybrid", "ｈｙｂｒｉｄ", " hybrid\ufeff"])
def test_look_alike_run_names_are_normalised(qrels: Qrels, hierarchy: Hierarchy, name: str) -> None:
    assert parse_run_csv("cohort_id,code\ndm2,E11.9\n", qrels, hierarchy, name).name == "hybrid"
    text = json.dumps({"name": name, "cohorts": {"dm2": ["E11.9"]}})
    assert parse_run_json(text, qrels, hierarchy, "x").name == "hybrid"


def test_a_name_of_only_invisible_characters_is_refused(qrels: Qrels, hierarchy: Hierarchy) -> None:
    with pytest.raises(RunImportError, match="no visible characters"):
        parse_run_csv("cohort_id,code\ndm2,E11.9\n", qrels, hierarchy, "\u200b \u200d")


@pytest.mark.parametrize("name", ["Hybrid", "hybrid\u200b", "HYBRID "])
def test_a_run_reading_as_a_method_name_is_refused(
    fixture_con: duckdb.DuckDBPyConnection, qrels: Qrels, name: str
) -> None:
    run = Run(name=name, cohorts={"dm2": [RunEntry(code="E11.9")]})
    with pytest.raises(PhenoforgeError, match="like a method it is compared with"):
        run_methods(fixture_con, qrels, ["hybrid"], extra_runs=[run])
    with pytest.raises(PhenoforgeError, match="second run"):
        run_methods(fixture_con, qrels, ["bm25"], extra_runs=[Run(name="mine"), Run(name="MINE")])


def test_a_json_nested_too_deeply_is_refused_not_a_crash(qrels: Qrels, hierarchy: Hierarchy) -> None:
    with pytest.raises(RunImportError, match="nested too deeply"):
        parse_run_json("[" * 100_000 + "]" * 100_000, qrels, hierarchy, "mine")


def test_a_cyrillic_look_alike_name_is_refused(
    fixture_con: duckdb.DuckDBPyConnection, qrels: Qrels, hierarchy: Hierarchy
) -> None:
    """NFKC keeps Cyrillic 'һ' apart from Latin 'h': a name mixing the scripts is refused instead."""
    with pytest.raises(RunImportError, match="mixes Latin, Cyrillic or Greek"):
        parse_run_csv("cohort_id,code\ndm2,E11.9\n", qrels, hierarchy, "\u04bbybrid")
    run = Run(name="\u04bbybrid", cohorts={"dm2": [RunEntry(code="E11.9")]})
    with pytest.raises(PhenoforgeError, match="look-alike"):
        run_methods(fixture_con, qrels, ["hybrid"], extra_runs=[run])
    assert parse_run_csv("cohort_id,code\ndm2,E11.9\n", qrels, hierarchy, "гибрид").name == "гибрид"  # one script


def test_non_finite_scores_in_json_are_refused(qrels: Qrels, hierarchy: Hierarchy) -> None:
    with pytest.raises(RunImportError, match="score 'nan' is not finite"):
        parse_run_json('{"cohorts": {"dm2": [{"code": "E11.9", "score": NaN}]}}', qrels, hierarchy, "mine")

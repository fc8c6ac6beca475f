"""Comparing two code lists: shared, only in each, near misses by tree distance, one scored against the other."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from phenoforge.cli import main
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.compare import compare_lists
from phenoforge.eval.scoring import score_cohort


def test_shared_only_and_near_misses_read_both_ways(fixture_con: duckdb.DuckDBPyConnection) -> None:
    hierarchy = get_hierarchy(fixture_con)
    result = compare_lists(hierarchy, ["E11.9", "E11.21", "zz9.99"], ["e119", "E11.22"], "mine", "theirs")
    assert result.shared == ["E11.9"] and result.only_first == ["E11.21"] and result.only_second == ["E11.22"]
    assert [(m.code, m.nearest) for m in result.near_first] == [("E11.21", "E11.22")]
    assert [(m.code, m.nearest) for m in result.near_second] == [("E11.22", "E11.21")]
    assert result.near_first[0].distance == 2 and result.unknown == ["zz9.99"]


def test_the_second_is_scored_as_the_benchmark_scores_a_method(fixture_con: duckdb.DuckDBPyConnection) -> None:
    first, second = ["E11.51", "I73"], ["I73", "E11.9"]
    result = compare_lists(get_hierarchy(fixture_con), first, second)
    benchmark = score_cohort(fixture_con, "c", "c", first, second, "m")
    assert (result.hierarchical, result.coverage, result.exact_f1) == (
        benchmark.hierarchical_score,
        benchmark.coverage,
        benchmark.exact_f1,
    )


def test_a_near_miss_further_than_the_limit_is_not_paired(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = compare_lists(get_hierarchy(fixture_con), ["E11.21"], ["E11.22"], max_distance=1)
    assert result.near_first == [] and result.only_first == ["E11.21"]


@pytest.fixture
def cli_vocabulary(fixture_db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from phenoforge.config import vocab_db_path

    target = vocab_db_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(fixture_db_path, target)


@pytest.mark.usefixtures("cli_vocabulary")
def test_compare_reads_files_and_says_what_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "a.csv").write_text("code,name\nE11.9,a\nE11.21,b\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("E11.9\nE11.22\n", encoding="utf-8")
    assert main(["compare", str(tmp_path / "a.csv"), str(tmp_path / "b.txt")]) == 0
    out = capsys.readouterr().out
    assert "shared: 1" in out and "E11.21     ~ E11.22     distance 2" in out
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    assert main(["compare", str(tmp_path / "empty.txt"), str(tmp_path / "empty.txt")]) == 2
    assert "nothing to compare" in capsys.readouterr().err
    assert main(["compare", "no-such-thing", str(tmp_path / "b.txt")]) == 2
    assert "neither a file nor LIBRARY/COHORT" in capsys.readouterr().err
    (tmp_path / "wide.csv").write_text("a,b\nE11.9,x\n", encoding="utf-8")
    assert main(["compare", str(tmp_path / "wide.csv"), str(tmp_path / "b.txt")]) == 2
    assert "named 'code'" in capsys.readouterr().err

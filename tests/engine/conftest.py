"""The real ICD-10-CM vocabulary, built once per test session for the few integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.db import connect, ensure_vocabulary


@pytest.fixture(scope="session")
def real_db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default built from simple-icd-10-cm into a temporary folder (about 5 s).

    One fixed path per session, so a module elsewhere that imports this fixture finds it built.
    """
    return ensure_vocabulary(tmp_path_factory.getbasetemp() / "real-vocab" / "vocab.duckdb")


@pytest.fixture(scope="session")
def real_con(real_db_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = connect(real_db_path)
    yield con
    con.close()

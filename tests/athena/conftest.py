"""Session fixtures: the synthetic Athena download, loaded once, and its read-only connection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from phenoforge.athena.loader import AthenaLoadReport, load_athena
from tests.athena.athena_fixture import write_athena_fixture


@pytest.fixture(scope="session")
def athena_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_athena_fixture(tmp_path_factory.mktemp("athena") / "download")


@pytest.fixture(scope="session")
def athena_load(
    athena_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, AthenaLoadReport]:
    db_path = tmp_path_factory.mktemp("athena-db") / "vocab.duckdb"
    return db_path, load_athena(athena_dir, db_path)


@pytest.fixture(scope="session")
def athena_con(athena_load: tuple[Path, AthenaLoadReport]) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect(str(athena_load[0]), read_only=True)
    yield con
    con.close()

"""Shared fixtures: the tiny fixture vocabulary, a fixture cohort library and a synthetic Athena download."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, settings

from phenoforge.athena.loader import AthenaLoadReport, load_athena
from tests.athena.athena_fixture import write_athena_fixture
from tests.fixture_vocab import build_fixture_vocab

SLOW_TESTS = (
    "tests/methods/",  # each fits the set builders on fixture libraries
    "tests/setbuild/learned/",  # membership models trained, stored, raced
    "tests/test_prune.py",  # generations of fitted builders made, then pruned
    "tests/test_cli.py",
    "tests/test_cli_reliability.py",
    "tests/test_cli_fresh_process.py",  # every command in a fresh interpreter
    "tests/test_cli_runs.py",
    "tests/test_cli_error_messages.py",
    "tests/test_cli_sweep.py",
    "tests/test_cli_sweep_arguments.py",
    "tests/test_cli_clean.py",
    "tests/libraries/test_bundled.py",  # the real packaged libraries
    "tests/libraries/test_quan.py",
    "tests/libraries/test_destination_safety.py",
    "tests/engine/test_bm25.py",
    "tests/engine/test_vocab_build.py",
    "tests/engine/dense/test_distinct.py",
    "tests/eval/test_decomposition.py",
    "tests/eval/test_agreement.py",
    "tests/agent/test_assemble_page.py",
    "tests/agent/test_cli.py",
    "tests/setbuild/test_builder_registry.py",
)
"""Test files of the full tier only (``-m "not slow"`` leaves them out): each fits models, starts processes or
reads the real packaged data. The quick tier (``bash scripts/test.sh --quick``) runs the rest."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("::", 1)[0].startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


# The machines are shared and noisy: a property test checks properties, not speed.
settings.register_profile("phenoforge", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("phenoforge")


@pytest.fixture(scope="session", autouse=True)
def _isolated_session_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Session-scoped fixtures are set up before a test's own folder below: they get a temporary one too (their
    training examples wrote node tables and word counts into the real ``data/models`` before)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path_factory.mktemp("session-data") / "data"))
        patch.setenv("PHENOFORGE_CONFIG_DIR", str(tmp_path_factory.mktemp("session-config") / "config"))
        yield


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes into the real data directory, nor a signing key into the user's configuration folder."""
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PHENOFORGE_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture(scope="session")
def fixture_db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture_vocab(tmp_path_factory.mktemp("vocab") / "vocab.duckdb")


@pytest.fixture(scope="session")
def fixture_con(fixture_db_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect(str(fixture_db_path), read_only=True)
    yield con
    con.close()


# The synthetic Athena download, loaded once (the loader's, the OHDSI path's and the engine's
# standard-concept mapping tests share it).
@pytest.fixture(scope="session")
def athena_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_athena_fixture(tmp_path_factory.mktemp("athena") / "download")


@pytest.fixture(scope="session")
def athena_load(athena_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AthenaLoadReport]:
    db_path = tmp_path_factory.mktemp("athena-db") / "vocab.duckdb"
    return db_path, load_athena(athena_dir, db_path)


@pytest.fixture(scope="session")
def athena_con(athena_load: tuple[Path, AthenaLoadReport]) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect(str(athena_load[0]), read_only=True)
    yield con
    con.close()

"""No test, and no fixture a test uses, writes into the real data directory (or one the developer set)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phenoforge.config import REPO_ROOT, data_dir

DEVELOPERS = os.environ.get("PHENOFORGE_DATA_DIR")
"""The data folder set when the tests were collected (before any fixture ran), if any."""


@pytest.fixture(scope="session")
def seen_by_a_session_fixture() -> Path:
    """What a session-scoped fixture (set up before a test's own folder) would build into."""
    return data_dir()


def test_a_session_fixture_builds_into_a_temporary_folder(seen_by_a_session_fixture: Path) -> None:
    assert not seen_by_a_session_fixture.is_relative_to(REPO_ROOT)
    if DEVELOPERS:
        assert seen_by_a_session_fixture != Path(DEVELOPERS).expanduser().resolve()


def test_a_test_builds_into_its_own_folder(tmp_path: Path) -> None:
    assert data_dir() == (tmp_path / "data").resolve()

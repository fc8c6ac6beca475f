"""AppTest fixtures: one fixture data directory per session, fresh app state per test."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from phenoforge.config import REPO_ROOT
from tests.dashboard.fixture_data import build_dashboard_data, dashboard_env


@pytest.fixture(scope="session")
def dashboard_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dashboard_data(tmp_path_factory.mktemp("dashboard") / "data")


@pytest.fixture
def dash(dashboard_data: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the app at the fixture data, with no saved runs and no cached resources."""
    for key, value in dashboard_env(dashboard_data).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("phenoforge.agent.claude._secrets_paths", lambda: [])  # no real key
    for leftover in dashboard_data.glob("app_state.sqlite*"):
        leftover.unlink()
    shutil.rmtree(dashboard_data / "versions", ignore_errors=True)  # signed-off lists of an earlier test
    st.cache_resource.clear()
    st.cache_data.clear()
    yield dashboard_data
    st.cache_resource.clear()


@pytest.fixture
def dash_con(dash: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect(str(dash / "vocab.duckdb"), read_only=True)
    yield con
    con.close()


@pytest.fixture
def app(dash: Path) -> Callable[[str], AppTest]:
    def make(page: str) -> AppTest:
        return AppTest.from_file(str(REPO_ROOT / page), default_timeout=60)

    return make


def frame_with(at: AppTest, column: str):  # type: ignore[no-untyped-def]
    """The first dataframe or table with ``column`` (AppTest does not expose their keys)."""
    for element in [*at.dataframe, *at.table]:
        if column in element.value.columns:
            return element.value
    raise AssertionError(f"no dataframe with a {column!r} column on the page")


def shown(text: object) -> str:
    """What a reader sees of a Markdown string the page escaped with ``plain``: no backslashes, no
    zero-width spaces."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", str(text)).replace("\u200b", "")

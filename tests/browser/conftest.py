"""Fixtures every browser test module shares: its own fixture data, one streamlit server on it for
the module, and a fresh headless Chromium per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import support as web
from tests.dashboard.fixture_data import build_dashboard_data


@pytest.fixture(scope="module")
def data_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A module's own dashboard data, so what one module's tests write never reaches another's."""
    return build_dashboard_data(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "data")


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    running = web.start_server(data_dir, tmp_path_factory.mktemp("server") / "streamlit.log")
    try:
        yield running.url
    finally:
        running.stop()


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Any]:
    driver = web.make_driver(tmp_path / "profile")
    yield driver
    driver.quit()

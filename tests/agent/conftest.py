"""A small cohort library over the fixture vocabulary, with near-duplicate cohorts on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dashboard.conftest import app, dash, dashboard_data  # noqa: F401  (AppTest fixtures for the page)
from tests.fixture_library import write_icd_library

FIXTURE_COHORTS: dict[str, tuple[str, list[str], bool]] = {
    "fix-T2DM": ("Type 2 diabetes mellitus", ["E11"], True),
    "fix-T1DM": ("Type 1 diabetes mellitus", ["E10"], True),
    "fix-HF": ("Heart failure", ["I50"], True),
    "fix-HFSYS": ("Systolic heart failure", ["I50.2"], True),
    "fix-ASTHMA": ("Asthma", ["J45"], True),
    "fix-OBESE": ("Obesity", ["E66.0", "E66.9"], False),
    "fix-AF1": ("Atrial fibrillation and flutter", ["I48"], True),
    "fix-AF2": ("Atrial fibrillation, paroxysmal or unspecified", ["I48.0", "I48.91"], False),
}


def write_fixture_library(dest: Path, library_id: str = "fixlib") -> Path:
    return write_icd_library(dest, FIXTURE_COHORTS, library_id, description="tests")


@pytest.fixture
def fixture_library(tmp_path: Path) -> Path:
    return write_fixture_library(tmp_path / "libraries" / "fixlib")


@pytest.fixture
def hung_server():
    """A server that accepts connections and never answers."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _address = listener.accept()
            except OSError:
                continue
            accepted.append(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    stop.set()
    thread.join(timeout=2)
    for connection in accepted:
        connection.close()
    listener.close()

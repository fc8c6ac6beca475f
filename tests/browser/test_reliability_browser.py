"""Issue 12 in a real browser: user text is shown as text (item 4), and a deep link that names a library or
cohort that is not there says so instead of showing another cohort (item 8)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phenoforge.agent import audit, nodes
from tests.browser import support as web

pytestmark = [pytest.mark.browser, web.requires_browser]


@pytest.fixture
def pixel_server() -> Iterator[tuple[str, list[str]]]:
    """A local web server that records every request: an image a page fetches shows up here."""
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            requests.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requests
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_session_description_is_text_and_fetches_nothing(
    server: str, data_dir: Path, driver: Any, pixel_server: tuple[str, list[str]]
) -> None:
    from selenium.webdriver.common.by import By

    pixel_url, requests = pixel_server
    description = f"adults with **bold** heart failure ![]({pixel_url}/pixel.png)"
    state = nodes.new_state(description, "hostile01", reviewer="ann")
    audit.save_state(state, path=data_dir / "app_state.sqlite")
    driver.get(f"{server}/Assemble?session=hostile01")
    web.wait_text(driver, "Session hostile01", "Seed terms")
    web.wait_idle(driver)
    web.no_exception(driver)
    text = web.body(driver)
    assert "adults with **bold** heart failure" in text and f"![]({pixel_url}/pixel.png)" in text
    assert not [img for img in driver.find_elements(By.TAG_NAME, "img") if "pixel" in (img.get_attribute("src") or "")]
    assert "bold" not in [strong.text.strip() for strong in driver.find_elements(By.TAG_NAME, "strong")]
    assert requests == []


@pytest.mark.parametrize(
    ("query", "notice"),
    [
        (
            "library=ohdsi-fixture&cohort=999",
            "The link asks for cohort '999', which library 'ohdsi-fixture' does not have; showing '503' instead.",
        ),
        (
            "library=no-such-lib&cohort=503",
            "The link asks for library 'no-such-lib', which is not installed; showing 'ohdsi-fixture' instead.",
        ),
    ],
)
def test_drilldown_link_to_a_missing_library_or_cohort_says_so(
    server: str, driver: Any, query: str, notice: str
) -> None:
    driver.get(f"{server}/Cohort_drilldown?{query}&method=bm25")
    web.wait_text(driver, notice)
    web.wait_idle(driver)
    web.no_exception(driver)

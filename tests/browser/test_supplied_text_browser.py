"""A hostile library, run name and ``?run=`` URL in a real browser: the DOM gets no <img>, <a> or
<strong> from them on any page (issue 34: markup injection)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import pytest

from tests.browser import support as web
from tests.dashboard.fixture_data import build_dashboard_data, dashboard_env, env
from tests.dashboard.test_supplied_text import HOSTILE, hostile_library

pytestmark = [pytest.mark.browser, web.requires_browser]

PAGES = ["", "Benchmark", "Cohort_drilldown", "Hybrid_weight", "Decomposition", "Explore", "Assemble"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fixture data plus a library whose names are markup, a run over it and an uploaded run named in markup."""
    from phenoforge.app_state import BenchmarkParameters
    from phenoforge.dashboard.benchmark import import_run_and_save, run_and_save
    from phenoforge.engine.curated import load_library

    root = build_dashboard_data(tmp_path_factory.mktemp("hostile") / "data")
    library = load_library(hostile_library(root / "libraries"))
    with env(**dashboard_env(root)):
        con = duckdb.connect(str(root / "vocab.duckdb"), read_only=True)
        try:
            parameters = BenchmarkParameters(methods=["bm25"], k=10, dense_weight=0.5, cohort_ids=library.cohort_ids)
            run_and_save(con, library, parameters)
            upload = b"cohort_id,code\nh503,E11.9\nh519,I50.9\n"
            run = import_run_and_save(con, library, upload, "mine.csv", ["bm25"], name=HOSTILE)
        finally:
            con.close()
    (root / "hostile_run_id").write_text(run.run_id)
    return root


INJECTED = """
return {
  img: Array.from(document.querySelectorAll('img')).map(e => e.getAttribute('src') || '')
    .filter(s => s.includes('e.x')),
  a: Array.from(document.querySelectorAll('a')).filter(e => (e.getAttribute('href') || '').includes('e.x'))
    .map(e => e.getAttribute('href') + ' in ' + e.parentElement.outerHTML.slice(0, 300)),
  strong: Array.from(document.querySelectorAll('strong, b')).map(e => e.textContent)
    .filter(t => t === 'bold' || t === 'h'),
  red: Array.from(document.querySelectorAll('[class*="red"], span[style*="color"]')).map(e => e.textContent)
    .filter(t => t === 'c'),
};
"""


@pytest.mark.parametrize("page", PAGES)
def test_no_markup_from_supplied_text_reaches_the_dom(server: str, data_dir: Path, driver: Any, page: str) -> None:
    run_id = (data_dir / "hostile_run_id").read_text()
    urls = [
        f"{server}/{page}?library=hostile-lib&cohort=h503&method=bm25&run={run_id}",
        f"{server}/{page}?run={quote(HOSTILE)}&q={quote(HOSTILE)}&code={quote(HOSTILE)}",
    ]
    for url in urls:
        driver.set_window_size(*web.NARROW)
        driver.get(url)
        web.wait_element(driver, '[data-testid="stMain"] h1')
        web.wait_idle(driver)
        if page == "Benchmark":  # open the run with the hostile name, so its names are on screen
            web.click(driver, '//input[@aria-label="Reopen a run"]')
            web.click(
                driver,
                f'(//*[@role="option"][contains(normalize-space(), "{run_id[:8]}") or '
                f'contains(normalize-space(), "imported run")])[1]',
            )
            web.wait_text(driver, "Methods, best first")
            web.wait_idle(driver)
        web.no_exception(driver)
        found = driver.execute_script(INJECTED)
        assert found == {"img": [], "a": [], "strong": [], "red": []}, (url, found)
    if page == "Benchmark":
        assert "**bold**" in web.body(driver)  # shown, as the characters typed

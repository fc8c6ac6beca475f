"""Every page at 1,280 px: what matters is inside the window with no sideways scrolling, the benchmark
summary is sorted and marked, the labels say what they mean (issue 32)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser import support as web

pytestmark = [pytest.mark.browser, web.requires_browser]


def open_page(driver: Any, url: str, *texts: str) -> None:
    driver.set_window_size(*web.NARROW)
    driver.get(url)
    web.wait_text(driver, *texts)
    web.wait_idle(driver)
    web.no_exception(driver)


def test_home_is_named_home_and_says_where_to_start(server: str, driver: Any) -> None:
    open_page(driver, server, "Start here", "Latest full benchmark per library", "phenoforge tests, version 1 (CC0)")
    entries = web.sidebar_entries(driver)
    assert entries[0] == "Home" and "app" not in entries
    assert {"Benchmark a library", "Build a list from a description"} <= set(web.body(driver).split("\n"))
    web.assert_fits(driver)
    web.shot(driver, "1280-home")


def test_a_direct_link_on_a_fresh_server_still_names_home(server: str, driver: Any) -> None:
    open_page(driver, f"{server}/Explore", "Look a code up")
    assert web.sidebar_entries(driver)[0] == "Home"


def test_benchmark_summary_fits_is_sorted_and_marks_the_best(server: str, driver: Any) -> None:
    open_page(driver, f"{server}/Benchmark", "Run benchmark")
    web.click_button(driver, "Run benchmark")
    web.wait_text(driver, "finished and saved", "Methods, best first by hierarchical", timeout=300)
    web.wait_element(driver, '[data-testid="stVegaLiteChart"], [data-testid="stArrowVegaLiteChart"]')
    web.wait_element(driver, '[data-testid="stPlotlyChart"] .main-svg')
    web.wait_idle(driver)
    web.no_exception(driver)
    header = web.grid_header(driver, 0)
    assert header[:5] == ["method", "Hierarchical", "Coverage", "Precision", "Exact F1"]
    assert header[5].startswith("vs bm25")
    assert "Over-inclusion" not in header
    rows = web.grid_rows(driver, 0)
    scores = [float(row[1]) for row in rows]
    assert scores == sorted(scores, reverse=True)  # best first
    assert rows[0][0].startswith("★ ")
    assert {row[0].removeprefix("★ ").removesuffix(" †") for row in rows} >= {"curated_transfer", "subtree", "bm25"}
    assert any(row[0].endswith("expand_descendants †") for row in rows)
    assert any(row[5] == "the baseline" for row in rows)
    assert all("0.0000" not in cell for row in rows for cell in row)
    web.assert_fits(driver)
    # the scatter's legend is inside the window, and no Plotly toolbar covers a title
    legend_right = driver.execute_script(
        """const l = Array.from(document.querySelectorAll('[data-testid="stVegaLiteChart"] .role-legend,'
        + '[data-testid="stArrowVegaLiteChart"] .role-legend'));
        return l.length ? Math.max(...l.map(e => e.getBoundingClientRect().right)) : null;"""
    )
    assert legend_right is not None and legend_right <= driver.execute_script(
        "return document.documentElement.clientWidth"
    )
    assert not driver.execute_script(
        """return Array.from(document.querySelectorAll('.modebar')).some(m => m.getBoundingClientRect().width > 0)"""
    )
    web.shot(driver, "1280-benchmark")
    # sorting by another measure reorders the table
    from selenium.webdriver.common.by import By

    web.click(driver, '//input[@aria-label="Sort by"]')
    web.click(driver, '//*[@role="option"][normalize-space()="Precision"]')
    web.wait_text(driver, "Methods, best first by precision")
    web.wait_idle(driver)
    rows = web.grid_rows(driver, 0)
    precision = [float(row[3]) for row in rows]
    assert precision == sorted(precision, reverse=True)
    assert driver.find_elements(By.CSS_SELECTOR, '[data-testid="stDataFrame"]')


def test_drilldown_table_and_histogram_at_1280(server: str, driver: Any) -> None:
    open_page(
        driver,
        f"{server}/Cohort_drilldown?library=ohdsi-fixture&cohort=519&method=bm25,subtree",
        "Heart failure · bm25",
        "Heart failure · subtree",
    )
    web.wait_element(driver, '[data-testid="stPlotlyChart"] .xtick')
    web.wait_idle(driver)
    assert web.grid_header(driver, 0) == ["code", "name", "in", "outcome", "credit", "why in the list"]
    rows = web.grid_rows(driver, 0)
    assert rows and all(row[3] == "hit" or row[3].startswith(("near miss at distance", "miss")) for row in rows)
    assert not any("None" in cell for row in rows for cell in row)
    ticks = driver.execute_script(
        """const c = document.querySelector('[data-testid="stPlotlyChart"]');
        return Array.from(c.querySelectorAll('.xtick text')).map(e => e.textContent);"""
    )
    numeric = [t for t in ticks if t.isdigit()]
    assert [int(t) for t in numeric] == list(range(len(numeric)))  # 0, 1, 2, ... in order, gaps included
    assert ticks[: len(numeric)] == numeric and all(t.startswith("no common") for t in ticks[len(numeric) :])
    web.assert_fits(driver)
    web.shot(driver, "1280-drilldown")


def test_explore_says_what_to_type_and_flags_a_nonsense_query(server: str, driver: Any) -> None:
    open_page(driver, f"{server}/Explore", "Type a condition")
    web.assert_fits(driver)
    open_page(driver, f"{server}/Explore?q=glorp%20snarfle%20wibble", "Nothing in the vocabulary supports this query")
    warning = driver.execute_script(
        """const w = Array.from(document.querySelectorAll('[data-testid="stAlertContentWarning"]'))
        .find(e => e.textContent.includes('Nothing in the vocabulary'));
        const r = w.getBoundingClientRect(); return [r.left, r.right, r.top];"""
    )
    assert warning[0] >= 0 and warning[1] <= driver.execute_script("return document.documentElement.clientWidth")
    web.grid_header(driver, 1)  # dense and hybrid results are still shown, under the warning
    assert len(web.layout(driver)["frames"]) >= 2
    web.assert_fits(driver)
    web.shot(driver, "1280-explore-nonsense")


@pytest.mark.parametrize(
    ("path", "text"),
    [("Hybrid_weight", "Mean hierarchical"), ("Decomposition", "Run 6 test cases"), ("Assemble", "Reviewer name")],
)
def test_the_other_pages_fit_1280(server: str, driver: Any, path: str, text: str) -> None:
    open_page(driver, f"{server}/{path}", text)
    web.assert_fits(driver)
    web.shot(driver, f"1280-{path.lower()}")


def test_decomposition_says_the_gap_in_words(server: str, driver: Any, data_dir: Path) -> None:
    open_page(driver, f"{server}/Decomposition", "Run 6 test cases")
    web.click_button(driver, "Run 6 test cases")
    web.wait_text(driver, "Decomposition scores", "Term on target", timeout=300)
    web.wait_idle(driver)
    assert "Mean gap (baseline" not in web.body(driver)
    web.assert_fits(driver)

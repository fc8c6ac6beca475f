"""The dashboard in a real browser: a streamlit server on fixture data, driven by headless Chromium.

Every page is opened, waited for, checked for an exception box and for the values the package
computes, and photographed under ``screenshots/`` (git-ignored). The slider is moved with the
keyboard and the numbers must change; two browser sessions run at once and both must be right.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from tests.browser import support as web
from tests.dashboard.fixture_data import FIXTURE_COHORTS, LIBRARY_DIR

pytestmark = [pytest.mark.browser, web.requires_browser]


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Callable[[], object]]:
    drivers = []

    def make() -> object:
        driver = web.make_driver(tmp_path / f"profile-{len(drivers)}")
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.quit()


def _expected_drilldown(data_dir: Path, cohort: str) -> dict[str, str]:
    from phenoforge.eval.harness import run_benchmark

    con = duckdb.connect(str(data_dir / "vocab.duckdb"), read_only=True)
    try:
        (result,) = run_benchmark(con, data_dir / "libraries" / LIBRARY_DIR, [cohort], methods=["bm25"], k=25).results
    finally:
        con.close()
    return {
        "Coverage": f"{result.coverage:.3f}",
        "Over-inclusion": f"{result.over_inclusion_penalty:.3f}",
        "Hierarchical": f"{result.hierarchical_score:.3f}",
    }


def _expected_weight(data_dir: Path, weight: float, k: int = 25) -> str:
    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.eval.harness import collect_rankings, rescore_hybrid
    from tests.engine.fake_embedder import FakeEmbedder

    con = duckdb.connect(str(data_dir / "vocab.duckdb"), read_only=True)
    try:
        dense = load_dense_if_ready(con, index_dir=data_dir / "dense", embed_fn=FakeEmbedder())
        cache = collect_rankings(
            con, data_dir / "libraries" / LIBRARY_DIR, list(FIXTURE_COHORTS), dense=dense, depth=100
        )
        report = rescore_hybrid(con, cache, weight, k=k)
    finally:
        con.close()
    return f"{report.mean_hierarchical_score_by_method['hybrid']:.3f}"


def test_every_page_in_a_real_browser(server: str, data_dir: Path, browser) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser()
    driver.get(server)
    web.wait_text(
        driver,
        "phenoforge test fixture",
        "Cohort libraries",
        "Dense index: ready",
        "No library has been benchmarked over all its cohorts yet.",
    )
    web.wait_idle(driver)
    web.no_exception(driver)
    assert web.wait_metrics(driver, "ICD-10-CM concepts")["ICD-10-CM concepts"] == "48"
    web.shot(driver, "1-home")

    driver.get(f"{server}/Benchmark")
    web.wait_text(driver, "Run benchmark")
    web.click_button(driver, "Run benchmark")
    web.wait_text(driver, "finished and saved: 48 results over 6 cohorts", "Paired permutation tests against bm25")
    web.wait_idle(driver)
    web.no_exception(driver)
    web.wait_element(driver, '[data-testid="stPlotlyChart"]')  # under load it renders after the run ends
    web.shot(driver, "2-benchmark")
    web.click(driver, '//a[.//p[normalize-space()="Open in the drilldown"]]')
    web.wait_text(driver, "Type 2 diabetes mellitus · bm25", "From saved run")
    assert "cohort=503" in driver.current_url and "run=" in driver.current_url
    web.no_exception(driver)

    driver.get(f"{server}/Cohort_drilldown?library=ohdsi-fixture&cohort=519&method=bm25")
    web.wait_text(driver, "Heart failure · bm25", "Tree distance to the nearest match")
    web.wait_idle(driver)
    web.no_exception(driver)
    metrics = web.wait_metrics(driver, "Coverage", "Over-inclusion", "Hierarchical")
    for label, value in _expected_drilldown(data_dir, "519").items():
        assert metrics[label] == value
    web.shot(driver, "3-drilldown")

    driver.get(f"{server}/Hybrid_weight")
    web.wait_text(driver, "Mean hierarchical", "Cohorts gaining most")
    web.wait_idle(driver)
    web.no_exception(driver)
    before = web.metrics(driver)["Mean hierarchical"]
    assert before == _expected_weight(data_dir, 0.5)
    from selenium.webdriver.common.action_chains import ActionChains

    thumb = driver.find_element(By.CSS_SELECTOR, '[data-testid="stSlider"] input[type="range"]')
    thumb = thumb.find_element(By.XPATH, "../..")  # the visible thumb around the hidden input
    ActionChains(driver).click(thumb).send_keys(Keys.HOME).perform()
    expected = _expected_weight(data_dir, 0.0)
    assert expected != before
    WebDriverWait(driver, web.WAIT, poll_frequency=0.2).until(
        lambda d: web.metrics(d).get("Mean hierarchical") == expected
    )
    web.wait_idle(driver)
    web.no_exception(driver)
    web.shot(driver, "4-hybrid-weight")

    driver.get(f"{server}/Decomposition")
    web.wait_text(driver, "Run 6 test cases")
    web.click_button(driver, "Run 6 test cases")
    web.wait_text(driver, "offline decomposer · ohdsi cases", "Decomposition scores")
    web.wait_idle(driver)
    web.no_exception(driver)
    assert web.metrics(driver)["Cases scored"] == "6"
    web.shot(driver, "5-decomposition")

    driver.get(f"{server}/Explore?q=heart%20failure&code=I50.21")
    web.wait_text(driver, "I50.21 · Acute systolic (congestive) heart failure", "Cohorts that contain it (1)")
    web.wait_idle(driver)
    web.no_exception(driver)
    web.shot(driver, "6-explore")

    driver.get(server)
    web.wait_text(driver, "Latest full benchmark per library", "Each library's newest run over all its cohorts")
    assert "No library has been benchmarked" not in web.body(driver)  # the full run above is the headline
    web.wait_idle(driver)
    web.no_exception(driver)


def test_two_sessions_at_once(server: str, data_dir: Path, browser) -> None:  # type: ignore[no-untyped-def]
    cohorts = ["503", "521"]
    drivers = [browser() for _ in cohorts]
    expected = {cohort: _expected_drilldown(data_dir, cohort) for cohort in cohorts}
    seen: dict[str, dict[str, str]] = {}
    errors: list[BaseException] = []

    def session(driver, cohort: str) -> None:  # type: ignore[no-untyped-def]
        try:
            driver.get(f"{server}/Cohort_drilldown?library=ohdsi-fixture&cohort={cohort}&method=bm25")
            web.wait_text(driver, f"{FIXTURE_COHORTS[cohort][0]} · bm25")
            web.wait_idle(driver)
            web.no_exception(driver)
            seen[cohort] = web.wait_metrics(driver, "Coverage", "Over-inclusion", "Hierarchical")
        except BaseException as error:  # noqa: BLE001 - re-raised in the main thread
            errors.append(error)

    threads = [threading.Thread(target=session, args=(d, c)) for d, c in zip(drivers, cohorts, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(web.WAIT * 2)
    assert not errors, errors[0]
    for cohort in cohorts:
        for label, value in expected[cohort].items():
            assert seen[cohort][label] == value
    assert seen["503"] != seen["521"] or expected["503"] == expected["521"]


def test_an_imported_run_sits_beside_the_builtins_with_paired_tests(  # type: ignore[no-untyped-def]
    server: str, browser, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    run_file = tmp_path / "colleague.csv"
    rows = [f"{cohort},{codes[0]},1" for cohort, (_name, codes) in FIXTURE_COHORTS.items()]
    run_file.write_text("cohort_id,code,rank\n" + "\n".join(rows) + "\n", encoding="utf-8")
    driver = browser()
    driver.get(f"{server}/Benchmark")
    web.wait_text(driver, "Score your own run (CSV or JSON)")
    web.expand(driver, "Score your own run (CSV or JSON)")
    web.wait_text(driver, "Run file")
    driver.find_element(By.CSS_SELECTOR, '[data-testid="stFileUploader"] input[type="file"]').send_keys(str(run_file))
    web.wait_text(driver, "colleague.csv")
    web.click_button(driver, "Score the run")
    web.wait_text(driver, "the imported run scored on 6 cohorts", "Paired permutation tests")
    web.wait_idle(driver)
    web.no_exception(driver)
    page = web.body(driver)
    assert "imported run colleague" in page or "colleague" in page
    web.shot(driver, "7-imported-run")

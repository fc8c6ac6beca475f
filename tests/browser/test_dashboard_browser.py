"""The dashboard in a real browser: a streamlit server on fixture data, driven by headless Chromium.

Every page is opened, waited for, checked for an exception box and for the values the package
computes, and photographed under ``screenshots/`` (git-ignored). The slider is moved with the
keyboard and the numbers must change; two browser sessions run at once and both must be right.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from phenoforge.config import REPO_ROOT
from tests.dashboard.fixture_data import FIXTURE_COHORTS, LIBRARY_DIR, build_dashboard_data, dashboard_env

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = REPO_ROOT / "screenshots"
WAIT = 60

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                       reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, "
                       "/usr/bin/chromedriver): apt-get install chromium chromium-driver"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.read().strip() == b"ok"
    except OSError:
        return False


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dashboard_data(tmp_path_factory.mktemp("browser") / "data")


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, **dashboard_env(data_dir)}
    log_path = tmp_path_factory.mktemp("server") / "streamlit.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true",
             "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + WAIT
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("streamlit did not start:\n" + log_path.read_text()[-3000:])
            time.sleep(0.2)  # polling for start-up, not an assertion
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Callable[[], object]]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    drivers = []

    def make() -> object:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        profile = tmp_path / f"profile-{len(drivers)}"
        for argument in ("--headless", "--no-sandbox", "--disable-gpu",
                         "--disable-background-networking", "--disable-dev-shm-usage",
                         "--window-size=1500,2200", f"--user-data-dir={profile}"):
            options.add_argument(argument)
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        driver.set_page_load_timeout(WAIT)
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.quit()


def _body(driver) -> str:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def _wait_text(driver, *texts: str, timeout: float = WAIT) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.2).until(
            lambda d: all(text in _body(d) for text in texts))
    except Exception as error:
        raise AssertionError(f"never saw {texts!r}; page says:\n{_body(driver)[:2000]}") from error


def _wait_idle(driver, timeout: float = WAIT) -> None:  # type: ignore[no-untyped-def]
    """Until no script run is in progress (Streamlit's running indicator is gone)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout, poll_frequency=0.2).until(
        lambda d: not d.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"] button')
        and not d.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidgetRunningIcon"]'))


def _no_exception(driver) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    boxes = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    assert not boxes, boxes[0].text[:2000]


def _metrics(driver) -> dict[str, str]:  # type: ignore[no-untyped-def]
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    out = {}
    try:
        for metric in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]'):
            label = metric.find_element(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]').text.strip()
            value = metric.find_element(By.CSS_SELECTOR, '[data-testid="stMetricValue"]').text.strip()
            out[label] = value
    except StaleElementReferenceException:  # the page re-rendered under us: read again
        return _metrics(driver)
    return out


def _wait_metrics(driver, *labels: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, WAIT, poll_frequency=0.2).until(
        lambda d: all(label in _metrics(d) for label in labels))
    return _metrics(driver)


def _shot(driver, name: str) -> Path:  # type: ignore[no-untyped-def]
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"fixture-{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    return path


def _click_button(driver, label: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    xpath = f'//button[.//p[normalize-space()="{label}"] or normalize-space()="{label}"]'
    button = WebDriverWait(driver, WAIT).until(ec.element_to_be_clickable((By.XPATH, xpath)))
    button.click()


def _expected_drilldown(data_dir: Path, cohort: str) -> dict[str, str]:
    from phenoforge.eval.harness import run_benchmark

    con = duckdb.connect(str(data_dir / "vocab.duckdb"), read_only=True)
    try:
        (result,) = run_benchmark(con, data_dir / "libraries" / LIBRARY_DIR, [cohort],
                                  methods=["bm25"], k=25).results
    finally:
        con.close()
    return {"Coverage": f"{result.coverage:.3f}",
            "Over-inclusion": f"{result.over_inclusion_penalty:.3f}",
            "Hierarchical": f"{result.hierarchical_score:.3f}"}


def _expected_weight(data_dir: Path, weight: float, k: int = 25) -> str:
    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.eval.harness import collect_rankings, rescore_hybrid
    from tests.engine.fake_embedder import FakeEmbedder

    con = duckdb.connect(str(data_dir / "vocab.duckdb"), read_only=True)
    try:
        dense = load_dense_if_ready(con, index_dir=data_dir / "dense", embed_fn=FakeEmbedder())
        cache = collect_rankings(con, data_dir / "libraries" / LIBRARY_DIR, list(FIXTURE_COHORTS),
                                 dense=dense, depth=100)
        report = rescore_hybrid(con, cache, weight, k=k)
    finally:
        con.close()
    return f"{report.mean_hierarchical_score_by_method['hybrid']:.4f}"


def test_every_page_in_a_real_browser(server: str, data_dir: Path, browser) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser()
    driver.get(server)
    _wait_text(driver, "phenoforge test fixture", "Cohort libraries", "Dense index: ready",
               "No benchmark has been run yet.")
    _wait_idle(driver)
    _no_exception(driver)
    assert _wait_metrics(driver, "ICD-10-CM concepts")["ICD-10-CM concepts"] == "48"
    _shot(driver, "1-home")

    driver.get(f"{server}/Benchmark")
    _wait_text(driver, "Run benchmark")
    _click_button(driver, "Run benchmark")
    _wait_text(driver, "finished and saved: 18 results over 6 cohorts", "Paired permutation tests")
    _wait_idle(driver)
    _no_exception(driver)
    assert driver.find_elements(By.CSS_SELECTOR, '[data-testid="stPlotlyChart"]')
    _shot(driver, "2-benchmark")
    driver.find_element(By.XPATH, '//a[.//p[normalize-space()="Open in the drilldown"]]').click()
    _wait_text(driver, "Type 2 diabetes mellitus · bm25", "From saved run")
    assert "cohort=503" in driver.current_url and "run=" in driver.current_url
    _no_exception(driver)

    driver.get(f"{server}/Cohort_drilldown?library=ohdsi-fixture&cohort=519&method=bm25")
    _wait_text(driver, "Heart failure · bm25", "Tree distance to the nearest match")
    _wait_idle(driver)
    _no_exception(driver)
    metrics = _wait_metrics(driver, "Coverage", "Over-inclusion", "Hierarchical")
    for label, value in _expected_drilldown(data_dir, "519").items():
        assert metrics[label] == value
    _shot(driver, "3-drilldown")

    driver.get(f"{server}/Hybrid_weight")
    _wait_text(driver, "Mean hierarchical", "Cohorts gaining most")
    _wait_idle(driver)
    _no_exception(driver)
    before = _metrics(driver)["Mean hierarchical"]
    assert before == _expected_weight(data_dir, 0.5)
    from selenium.webdriver.common.action_chains import ActionChains

    thumb = driver.find_element(By.CSS_SELECTOR, '[data-testid="stSlider"] input[type="range"]')
    thumb = thumb.find_element(By.XPATH, "../..")  # the visible thumb around the hidden input
    ActionChains(driver).click(thumb).send_keys(Keys.HOME).perform()
    expected = _expected_weight(data_dir, 0.0)
    assert expected != before
    WebDriverWait(driver, WAIT, poll_frequency=0.2).until(
        lambda d: _metrics(d).get("Mean hierarchical") == expected)
    _wait_idle(driver)
    _no_exception(driver)
    _shot(driver, "4-hybrid-weight")

    driver.get(f"{server}/Decomposition")
    _wait_text(driver, "Run 6 test cases")
    _click_button(driver, "Run 6 test cases")
    _wait_text(driver, "offline decomposer · ohdsi cases", "Mean gap (baseline − decomposed)")
    _wait_idle(driver)
    _no_exception(driver)
    assert _metrics(driver)["Cases scored"] == "6"
    _shot(driver, "5-decomposition")

    driver.get(f"{server}/Explore?q=heart%20failure&code=I50.21")
    _wait_text(driver, "I50.21 · Acute systolic (congestive) heart failure",
               "Cohorts that contain it (1)")
    _wait_idle(driver)
    _no_exception(driver)
    _shot(driver, "6-explore")

    driver.get(server)
    _wait_text(driver, "Latest benchmark", "k=25")
    _wait_idle(driver)
    _no_exception(driver)


def test_two_sessions_at_once(server: str, data_dir: Path, browser) -> None:  # type: ignore[no-untyped-def]
    cohorts = ["503", "521"]
    drivers = [browser() for _ in cohorts]
    expected = {cohort: _expected_drilldown(data_dir, cohort) for cohort in cohorts}
    seen: dict[str, dict[str, str]] = {}
    errors: list[BaseException] = []

    def session(driver, cohort: str) -> None:  # type: ignore[no-untyped-def]
        try:
            driver.get(f"{server}/Cohort_drilldown?library=ohdsi-fixture&cohort={cohort}&method=bm25")
            _wait_text(driver, f"{FIXTURE_COHORTS[cohort][0]} · bm25")
            _wait_idle(driver)
            _no_exception(driver)
            seen[cohort] = _wait_metrics(driver, "Coverage", "Over-inclusion", "Hierarchical")
        except BaseException as error:  # noqa: BLE001 - re-raised in the main thread
            errors.append(error)

    threads = [threading.Thread(target=session, args=(d, c)) for d, c in zip(drivers, cohorts, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 2)
    assert not errors, errors[0]
    for cohort in cohorts:
        for label, value in expected[cohort].items():
            assert seen[cohort][label] == value
    assert seen["503"] != seen["521"] or expected["503"] == expected["521"]

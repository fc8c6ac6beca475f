"""Shared pieces of the real-browser tests: a streamlit server on fixture data, headless Chromium,
and waits on what the page renders (never fixed sleeps before an assertion).

A server is a plain object with ``stop()`` so a test can restart it mid-test on the same data dir.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phenoforge.config import REPO_ROOT
from tests.dashboard.fixture_data import dashboard_env

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = REPO_ROOT / "screenshots"
WAIT = 60

requires_browser = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver): "
    "apt-get install chromium chromium-driver",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.read().strip() == b"ok"
    except OSError:
        return False


@dataclass
class Server:
    """One ``streamlit run app.py`` process; ``stop`` is idempotent so teardown can always call it."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        return int(self.process.returncode)


def start_server(data_dir: Path, log_path: Path, extra_env: dict[str, str] | None = None) -> Server:
    """A server on a free localhost port over ``data_dir`` (``extra_env``: settings over the tests' own),
    returned once it answers its health check."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, **dashboard_env(data_dir), **(extra_env or {})}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
                "--server.headless",
                "true",
                "--browser.gatherUsageStats",
                "false",
                "--server.fileWatcherType",
                "none",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(process, url, log_path)
    try:
        deadline = time.monotonic() + WAIT
        while not healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("streamlit did not start:\n" + log_path.read_text()[-3000:])
            time.sleep(0.2)  # polling for start-up, not an assertion
    except BaseException:
        server.stop()
        raise
    return server


def make_driver(profile: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--window-size=1500,2200",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT)
    return driver


def body(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def wait_text(driver: Any, *texts: str, timeout: float = WAIT) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: all(text in body(d) for text in texts))
    except Exception as error:
        raise AssertionError(f"never saw {texts!r}; page says:\n{body(driver)[:2000]}") from error


def wait_element(driver: Any, css: str, timeout: float = WAIT) -> None:
    """Until an element matching ``css`` is on the page (a chart renders after the script run ends)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: d.find_elements(By.CSS_SELECTOR, css))
    except Exception as error:
        raise AssertionError(f"never saw an element {css!r}; page says:\n{body(driver)[:2000]}") from error


def wait_idle(driver: Any, timeout: float = WAIT) -> None:
    """Until no script run is in progress (Streamlit's running indicator is gone)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout, poll_frequency=0.2).until(
        lambda d: (
            not d.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"] button')
            and not d.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidgetRunningIcon"]')
        )
    )


def no_exception(driver: Any) -> None:
    from selenium.webdriver.common.by import By

    boxes = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    assert not boxes, boxes[0].text[:2000]


def metrics(driver: Any) -> dict[str, str]:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    out = {}
    try:
        for metric in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]'):
            label = metric.find_element(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]').text.strip()
            value = metric.find_element(By.CSS_SELECTOR, '[data-testid="stMetricValue"]').text.strip()
            out[label] = value
    except StaleElementReferenceException:  # the page re-rendered under us: read again
        return metrics(driver)
    return out


def wait_metrics(driver: Any, *labels: str) -> dict[str, str]:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, WAIT, poll_frequency=0.2).until(lambda d: all(label in metrics(d) for label in labels))
    return metrics(driver)


def shot(driver: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"fixture-{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    return path


def click(driver: Any, xpath: str, timeout: float = WAIT) -> None:
    """Click the element at ``xpath`` once the page has settled: scrolled to the middle of the view, and
    clicked again while another element still lies over it (a slider of a page still laying itself out
    took a click meant for an expander under load)."""
    from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    def clicked(d: Any) -> bool:
        try:
            element = ec.element_to_be_clickable((By.XPATH, xpath))(d)
            if not element:
                return False
            d.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
            element.click()
            return True
        except (ElementClickInterceptedException, StaleElementReferenceException):
            return False

    wait_idle(driver, timeout)
    WebDriverWait(driver, timeout, poll_frequency=0.3).until(clicked)


def expand(driver: Any, label: str, timeout: float = WAIT) -> None:
    """Open the expander titled ``label`` and keep it open: under load the page can re-render it
    closed after the click (seen in CI-like runs), so the click is repeated until it stays open."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    details = f'//details[./summary[.//p[normalize-space()="{label}"]]]'

    def is_open(d: Any) -> bool:
        try:
            found = d.find_elements(By.XPATH, details)
            return bool(found) and found[0].get_attribute("open") is not None
        except StaleElementReferenceException:
            return False

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not is_open(driver):
            click(driver, f"{details}/summary", timeout)
        try:
            WebDriverWait(driver, 3, poll_frequency=0.2).until(is_open)
            wait_idle(driver, timeout)
            if is_open(driver):
                return
        except Exception:  # not open yet: click again
            continue
    raise AssertionError(f"the expander {label!r} never stayed open; page says:\n{body(driver)[:2000]}")


def click_button(driver: Any, label: str) -> None:
    click(driver, f'//button[.//p[normalize-space()="{label}"] or normalize-space()="{label}"]')


NARROW = (1280, 1400)
"""The window the layout tests use: a 1,280 px wide browser, as a new user's laptop has."""

_LAYOUT = """
const vw = document.documentElement.clientWidth;
const frames = Array.from(document.querySelectorAll('[data-testid="stDataFrame"]')).map(f => {
  const r = f.getBoundingClientRect();
  const s = f.querySelector('.dvn-scroller');
  return {right: r.right, width: r.width, scroll: s ? s.scrollWidth : 0, client: s ? s.clientWidth : 0};
});
const charts = Array.from(document.querySelectorAll(
  '[data-testid="stPlotlyChart"], [data-testid="stVegaLiteChart"], [data-testid="stArrowVegaLiteChart"]'
)).map(c => c.getBoundingClientRect().right);
return {vw: vw, page_scroll: document.documentElement.scrollWidth, frames: frames, charts: charts};
"""


def layout(driver: Any) -> dict[str, Any]:
    """The viewport width, the page's scroll width, every data grid's box and inner scroll, every chart's edge."""
    return dict(driver.execute_script(_LAYOUT))


def assert_fits(driver: Any) -> None:
    """Nothing that matters needs a horizontal scroll: the page, each table (its columns fit its box), each chart."""
    found = layout(driver)
    vw = found["vw"]
    assert found["page_scroll"] <= vw, found
    for frame in found["frames"]:
        assert frame["right"] <= vw + 1, found
        assert frame["scroll"] <= frame["client"] + 1, f"a table scrolls sideways: {frame}"
    for right in found["charts"]:
        assert right <= vw + 1, found


def grid_rows(driver: Any, index: int = 0) -> list[list[str]]:
    """The text of a data grid's body cells (its accessible table), row by row."""
    return list(
        driver.execute_script(
            """
            const f = document.querySelectorAll('[data-testid="stDataFrame"]')[arguments[0]];
            return Array.from(f.querySelectorAll('tbody tr')).map(r =>
              Array.from(r.querySelectorAll('td')).map(c => c.textContent));
            """,
            index,
        )
    )


def grid_header(driver: Any, index: int = 0) -> list[str]:
    """A data grid's column names, once the grid has drawn them (it renders after the script run)."""
    from selenium.webdriver.support.ui import WebDriverWait

    def read(d: Any) -> list[str]:
        return list(
            d.execute_script(
                """const f = document.querySelectorAll('[data-testid="stDataFrame"]')[arguments[0]];
                return f ? Array.from(f.querySelectorAll('thead th')).map(c => c.textContent) : [];""",
                index,
            )
        )

    WebDriverWait(driver, WAIT, poll_frequency=0.2).until(read)
    return read(driver)


def sidebar_entries(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    links = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')
    return [link.text.strip().split("\n")[-1] for link in links]  # the icon's name comes first


def keyed(key: str) -> str:
    """XPath of the container Streamlit gives a widget with ``key`` (its ``st-key-<key>`` class)."""
    slug = re.sub(r"[^a-zA-Z0-9_-]", "-", key)
    return f'//div[contains(concat(" ", normalize-space(@class), " "), " st-key-{slug} ")]'


def type_into(driver: Any, key: str, text: str, tag: str = "input") -> None:
    """Replace the text of the widget ``key`` (an ``input``, or ``textarea``), submit it, wait until it shows it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    wait_idle(driver)
    box = driver.find_element(By.XPATH, f"{keyed(key)}//{tag}")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(text)
    if tag == "input":
        box.send_keys(Keys.ENTER)
    WebDriverWait(driver, WAIT).until(lambda d: box.get_attribute("value") == text)
    wait_idle(driver)

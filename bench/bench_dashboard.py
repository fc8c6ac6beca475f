"""Dashboard latency as a user sees it: warm page loads and the hybrid-weight slider's re-render.

Starts ``streamlit run app.py`` on a free localhost port against a data directory, drives headless
Chromium (Debian's chromium + chromedriver) and prints medians:

- warm page load: ``driver.get(page)`` until the page's last section is on screen and the script
  has finished, after one cold load that fills the process caches (targets: under 2 s);
- slider re-render: one keyboard step on the slider (a new weight: cached rankings re-fused and
  every cohort re-scored, no retrieval) until the chart marks the new weight (target: under 0.5 s),
  and jumps between two weights already scored (memoised);
- in process: ``rescore_hybrid`` alone per new weight, the compute inside a slider step.

    python bench/bench_dashboard.py                  # the real data in data/ (needs the dense index)
    python bench/bench_dashboard.py --fixture        # the test fixture (fake embedder)
    python bench/bench_dashboard.py --library cms-hcc-v28-py2026 --runs 7
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from phenoforge.config import REPO_ROOT

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("streamlit exited during start-up")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("streamlit did not become healthy")


def make_driver(profile: Path):  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
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
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def body(driver) -> str:  # type: ignore[no-untyped-def]
    try:
        return driver.find_element("tag name", "body").text
    except Exception:  # noqa: BLE001 - mid re-render
        return ""


def has_text(driver, text: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(driver.execute_script("return document.body.innerText.includes(arguments[0])", text))


def idle(driver) -> bool:  # type: ignore[no-untyped-def]
    """No script run in progress (Streamlit shows a status widget while one is)."""
    return not driver.execute_script(
        "return document.querySelector('[data-testid=\"stStatusWidget\"] button') !== null"
    )


def legend_shows(driver, text: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(
        driver.execute_script(
            "return Array.from(document.querySelectorAll('.legendtext')).some(e => e.textContent === arguments[0])",
            text,
        )
    )


def wait_for(driver, predicate, timeout: float = 300) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if predicate(driver):
            return time.perf_counter() - start
        time.sleep(0.01)
    raise SystemExit(f"timed out; page says:\n{body(driver)[:1500]}")


def load(driver, url: str, marker: str) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    driver.get(url)
    wait_for(driver, lambda d: has_text(d, marker) and idle(d))
    if driver.find_elements("css selector", '[data-testid="stException"]'):
        raise SystemExit(f"exception box on {url}")
    return time.perf_counter() - start


def apptest_slider(env: dict[str, str], steps: int) -> None:
    """Server side only: the Hybrid weight script run per new slider weight (AppTest, no browser)."""
    from streamlit.testing.v1 import AppTest

    saved = dict(os.environ)
    os.environ.update(env)
    try:
        at = AppTest.from_file(str(REPO_ROOT / "pages" / "3_Hybrid_weight.py"), default_timeout=600)
        at.run()
        times = []
        for step in range(steps):
            start = time.perf_counter()
            at.slider(key="hw_weight").set_value(round(0.61 + step * 0.01, 2)).run()
            times.append(time.perf_counter() - start)
        if at.exception:
            raise SystemExit(f"Hybrid weight page raised: {at.exception[0].value}")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    print(
        f"Hybrid weight script run per new weight (server side, AppTest): median "
        f"{statistics.median(times) * 1000:.0f} ms (n={len(times)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", action="store_true", help="bench on the test fixture data")
    parser.add_argument("--data-dir", type=Path, default=REPO_ROOT / "data")
    parser.add_argument("--library", default=None, help="library id (default: Elixhauser, as the pages)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="slider steps to time")
    args = parser.parse_args()

    env = {**os.environ, "PHENOFORGE_DENSE_AUTOBUILD": "0"}
    tmp = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    if args.fixture:
        from tests.dashboard.fixture_data import build_dashboard_data, dashboard_env

        data_dir = build_dashboard_data(tmp / "data")
        env.update(dashboard_env(data_dir))
    else:
        data_dir = args.data_dir.resolve()
        env["PHENOFORGE_DATA_DIR"] = str(data_dir)

    import duckdb

    from phenoforge.engine.curated import list_libraries
    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.eval.harness import collect_rankings, rescore_hybrid

    libraries = list_libraries(data_dir / "libraries")
    wanted = args.library or next(
        (lib.library_id for lib in libraries if lib.library_id.startswith("elixhauser")), None
    )
    library = next((lib for lib in libraries if lib.library_id == wanted), libraries[0])
    con = duckdb.connect(str(data_dir / "vocab.duckdb"), read_only=True)
    embed = None
    if args.fixture:
        from tests.engine.fake_embedder import FakeEmbedder

        embed = FakeEmbedder()
    dense = load_dense_if_ready(con, index_dir=data_dir / "dense", embed_fn=embed)
    if dense is None:
        raise SystemExit(f"no dense index under {data_dir}: build it first (Home page or `python -m phenoforge build`)")
    cache = collect_rankings(con, library.path, library.cohort_ids, dense=dense, depth=100)
    rescore = []
    for step in range(args.steps):
        start = time.perf_counter()
        rescore_hybrid(con, cache, round(0.3 + step * 0.013, 3), k=25)
        rescore.append(time.perf_counter() - start)
    con.close()
    print(f"library {library.library_id}: {len(library.cohort_ids)} cohorts; data {data_dir}")
    print(
        f"rescore_hybrid per new weight (in process): median {statistics.median(rescore) * 1000:.0f} ms "
        f"over {len(rescore)} weights"
    )
    apptest_slider(env, args.steps)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
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
            "--server.fileWatcherType",
            "none",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    driver = None
    try:
        wait_healthy(url, process)
        driver = make_driver(tmp / "profile")
        lib = library.library_id
        first_cohort = library.cohort_ids[0]
        pages = [
            ("Home", "", "Latest benchmark"),
            ("Benchmark", "/Benchmark", "Saved runs"),
            (
                "Cohort drilldown",
                f"/Cohort_drilldown?library={lib}&cohort={first_cohort}&method=bm25",
                "Tree distance to the nearest match",
            ),
            ("Hybrid weight", "/Hybrid_weight", "Cohorts gaining most"),
            ("Decomposition", "/Decomposition", "Decomposer"),
            ("Explore", "/Explore?q=heart%20failure&code=I50.9", "Cohorts that contain it"),
        ]
        for name, path, marker in pages:
            cold = load(driver, url + path, marker)
            warm = [load(driver, url + path, marker) for _ in range(args.runs)]
            print(
                f"page {name:17s} cold {cold:6.2f} s   warm median {statistics.median(warm):5.2f} s "
                f"(min {min(warm):.2f}, max {max(warm):.2f}, n={len(warm)})"
            )

        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        load(driver, url + "/Hybrid_weight", "Cohorts gaining most")
        thumb = driver.find_element("css selector", '[data-testid="stSlider"] input[type="range"]')
        thumb = thumb.find_element("xpath", "../..")
        ActionChains(driver).click(thumb).perform()
        wait_for(driver, idle)

        def step(key: str, expect: str) -> float:
            start = time.perf_counter()
            ActionChains(driver).send_keys(key).perform()
            wait_for(driver, lambda d: legend_shows(d, f"current ({expect})") and idle(d))
            return time.perf_counter() - start

        weight = float(
            driver.find_element("css selector", '[data-testid="stSlider"] input[type="range"]').get_attribute("value")
        )
        fresh = []
        for _ in range(args.steps):
            weight = round(weight + 0.01, 2)
            fresh.append(step(Keys.ARROW_RIGHT, f"{weight:.2f}"))
        memo = []
        for index in range(args.steps):
            memo.append(step(Keys.HOME if index % 2 == 0 else Keys.END, "0.00" if index % 2 == 0 else "1.00"))
        memo = memo[2:]  # the first visit to 0 and to 1 are fresh weights
        print(
            f"slider step to a new weight: median {statistics.median(fresh) * 1000:.0f} ms "
            f"(max {max(fresh) * 1000:.0f} ms, n={len(fresh)})"
        )
        print(f"slider jump to a scored weight: median {statistics.median(memo) * 1000:.0f} ms (n={len(memo)})")
    finally:
        if driver is not None:
            driver.quit()
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


if __name__ == "__main__":
    main()

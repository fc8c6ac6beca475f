"""Assemble's review with about 500 generated candidates, as a reviewer sees it in a real browser.

Makes a session of a long description with no curated library checked (every term goes to generated
retrieval, ``--k`` hits each) in the data directory's app-state database, starts ``streamlit run app.py``
on it, opens ``/Assemble?session=<id>`` in headless Chromium (Debian's chromium + chromedriver), names the
reviewer and times each review action from the click until the page shows its result and the script run
has ended:

- include / exclude a whole branch (the most relevant block, then its first category), alternating;
- pick another branch to review.

Prints every timing and the median per kind (target: about a second).

    python bench/bench_assemble_review.py                       # the data in $PHENOFORGE_DATA_DIR or data/
    python bench/bench_assemble_review.py --k 60 --actions 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_dashboard import CHROMEDRIVER, CHROMIUM, body, free_port, idle, make_driver, wait_healthy

from phenoforge.config import REPO_ROOT, data_dir

DESCRIPTION = (
    "adults with heart failure, atrial fibrillation, type 2 diabetes, chronic kidney disease, gout, asthma, "
    "chronic obstructive pulmonary disease, pneumonia, sepsis, depression, osteoarthritis of the knee, "
    "hip fracture and anemia"
)


def make_session(k: int) -> tuple[str, int]:
    from phenoforge.agent import workflow
    from phenoforge.agent.offline import offline_decomposer
    from phenoforge.engine.db import connect
    from phenoforge.engine.dense import load_dense_if_ready

    con = connect()
    dense = load_dense_if_ready(con)
    state = workflow.start(con, DESCRIPTION, offline_decomposer(con, dense=dense), library_paths=[], dense=dense, k=k)
    return state.session_id, len(state.candidates)


def wait_for(driver, predicate, timeout: float = 120) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    deadline = start + timeout
    while time.perf_counter() < deadline:
        try:
            if predicate(driver) and idle(driver):
                return time.perf_counter() - start
        except Exception:  # noqa: BLE001 (the page re-rendered under the probe: look again)
            pass
        time.sleep(0.05)
    raise SystemExit(f"timed out; the page says:\n{body(driver)[:1500]}")


def retry(action, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    """Run ``action`` again while the page is still laying itself out (stale, covered or not yet drawn)."""
    deadline = time.perf_counter() + timeout
    while True:
        try:
            action()
            return
        except Exception:  # noqa: BLE001
            if time.perf_counter() > deadline:
                raise
            time.sleep(0.05)


CAPTION = '//*[@data-testid="stCaptionContainer"]'


def focus(driver) -> str:  # type: ignore[no-untyped-def]
    """The caption naming the branch in review ("Block I30-I5A: 40 candidates, pending. ..."), read in the
    browser (pulling the whole page's text every 50 ms cost more than the page's own re-render)."""
    from selenium.webdriver.common.by import By

    for element in driver.find_elements(By.XPATH, f'{CAPTION}[contains(., " candidates, ")]'):
        text = str(element.text)
        if text.startswith(("Block ", "Category ")):
            status = text.split(" candidates, ", 1)[1].split(". Save")[0].split("; the first")[0]
            return f"{text.split(':')[0]}: {status}"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=40, help="hits per term (default 40: about 500 candidates)")
    parser.add_argument("--actions", type=int, default=10, help="branch actions to time (default 10)")
    parser.add_argument(
        "--bulk",
        action="store_true",
        help="time only 'Accept all pending' (one action both the branch review and the per-code page before it "
        "have: run it with PYTHONPATH pointing at an older checkout to compare)",
    )
    args = parser.parse_args()
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        raise SystemExit("needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    session_id, n = make_session(args.k)
    print(f"session {session_id}: {n} generated candidates (k={args.k}, data {data_dir()})")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        log = open(Path(tmp) / "streamlit.log", "wb")  # noqa: SIM115 (closed below)
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.address",
             "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=REPO_ROOT, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        driver = make_driver(Path(tmp) / "profile")
        try:
            wait_healthy(url, process)
            start = time.perf_counter()
            driver.get(f"{url}/Assemble?session={session_id}")
            wait_for(driver, lambda d: f"of {n} pending)" in body(d), timeout=300)
            print(f"first load of the session: {time.perf_counter() - start:.2f} s")
            retry(
                lambda: driver.find_element(By.XPATH, '//div[contains(@class, "st-key-as_reviewer")]//input').send_keys(
                    "Bench Reviewer", Keys.ENTER
                )
            )
            wait_for(driver, lambda d: "Enter your name" not in body(d))

            def click(key: str) -> None:
                def once() -> None:
                    button = driver.find_element(By.XPATH, f'//div[contains(@class, "st-key-{key}")]//button')
                    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
                    button.click()

                retry(once)

            timings: dict[str, list[float]] = {"include/exclude a branch": [], "pick another branch": []}
            if args.bulk:
                start = time.perf_counter()
                click("as_accept_all")
                wait_for(driver, lambda d: d.find_elements(By.XPATH, f'//h3[contains(., "(0 of {n} pending)")]'))
                print(f"accept all pending: {time.perf_counter() - start:.2f} s")
                return
            for number in range(args.actions):
                label = "as_include" if number % 2 == 0 else "as_exclude"
                expect = "included" if number % 2 == 0 else "excluded"
                start = time.perf_counter()
                click(label)
                wait_for(driver, lambda d, e=expect: focus(d).endswith(" " + e))
                timings["include/exclude a branch"].append(time.perf_counter() - start)
                if number % 2 == 1:  # then move to the next branch in the list
                    before = focus(driver)
                    start = time.perf_counter()

                    def pick(position: int = number // 2 + 1) -> None:
                        driver.find_element(By.XPATH, '//div[contains(@class, "st-key-as_branch")]//input').click()
                        options = driver.find_elements(By.XPATH, '//*[@role="option"]')
                        options[min(position, len(options) - 1)].click()

                    retry(pick)
                    wait_for(driver, lambda d, b=before: focus(d).split(":")[0] not in ("", b.split(":")[0]))
                    timings["pick another branch"].append(time.perf_counter() - start)
            for kind, values in timings.items():
                if values:
                    shown = ", ".join(f"{value:.2f}" for value in values)
                    print(f"{kind}: median {statistics.median(values):.2f} s over {len(values)} ({shown})")
        finally:
            driver.quit()
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
            log.close()


if __name__ == "__main__":
    main()

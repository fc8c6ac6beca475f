"""A new user's first ``streamlit run app.py``: seconds from opening Home to "All methods ready".

Clones the repository's committed HEAD into a temporary folder, starts ``streamlit run app.py``
there on an empty data folder with the real model (nothing preset), opens Home in headless Chromium
and polls the page until it says "All methods ready" (dense index and set builders), printing when each
stage first shows (issue 31's target: <= 120 s on a 2-core AVX-512 machine, <= 240 s on an AVX2-only one).

    python bench/bench_first_run.py            # one run (the dense build takes minutes)
    python bench/bench_first_run.py --timeout 1800
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_fits import cpu_flags  # noqa: E402
from tests.browser.support import CHROMEDRIVER, CHROMIUM, body, free_port, healthy, make_driver  # noqa: E402

MILESTONES = ("vocabulary ready", "Cohort libraries", "dense index:", "Dense index: ready", "All methods ready")
DONE = "All methods ready"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=1500, help="give up after this many seconds")
    args = parser.parse_args()
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        print("needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)")
        return 1
    print(f"CPU: {cpu_flags()}")
    with tempfile.TemporaryDirectory(prefix="first-run-") as tmp:
        clone, data = Path(tmp) / "clone", Path(tmp) / "data"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("PHENOFORGE_EMBEDDER", "PHENOFORGE_DENSE_AUTOBUILD")
        }
        env["PHENOFORGE_DATA_DIR"] = str(data)
        log = open(Path(tmp) / "streamlit.log", "wb")  # noqa: SIM115 - closed below
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
            + ["--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"],
            cwd=clone,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        driver = None
        try:
            while not healthy(url):
                if server.poll() is not None:
                    print((Path(tmp) / "streamlit.log").read_text()[-2000:])
                    return 1
                time.sleep(0.2)
            driver = make_driver(Path(tmp) / "profile")
            started = time.perf_counter()
            driver.get(url)
            seen: dict[str, float] = {}
            text = ""
            while time.perf_counter() - started < args.timeout:
                try:
                    text = body(driver)
                except Exception:  # noqa: BLE001 - the page re-rendered under us: read again
                    continue
                for milestone in MILESTONES:
                    if milestone in text and milestone not in seen:
                        seen[milestone] = time.perf_counter() - started
                        print(f"{seen[milestone]:7.1f} s  {milestone!r} shown", flush=True)
                if DONE in seen:
                    break
                time.sleep(1.0)
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            if DONE in seen:
                print(
                    f"Home showed {DONE!r} {seen[DONE]:.1f} s after opening (load {load}); dense index ready after "
                    f"{seen.get('Dense index: ready', float('nan')):.1f} s"
                )
                manifest = data / "dense" / "manifest.json"
                if manifest.exists():
                    dense = json.loads(manifest.read_text(encoding="utf-8"))
                    kept = ("runtime", "count", "shipped_texts", "n_texts_embedded", "build_seconds")
                    print("dense index: " + ", ".join(f"{key} {dense.get(key)}" for key in kept))
                installed = sorted(path.name for path in (data / "models").glob("membership-*"))
                print(f"membership models in data/models: {len(installed)} ({', '.join(installed[:2])}, ...)")
                return 0
            print(f"not ready after {args.timeout:.0f} s (load {load}); page says:\n{text[:1500]}")
            return 1
        finally:
            if driver is not None:
                driver.quit()
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
            log.close()


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env bash
# Installs everything the test suite needs (Debian's Chromium for the browser tests, the pinned
# Python packages, phenoforge itself in editable mode), checks the code, then runs every test.
# The code checks come first and any failure stops the run, so pytest's closing line is the last
# thing printed: ruff (lint and format), mypy on the package, then pytest, which also runs the
# package's doctests and tests/test_boundaries.py (the import layering).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium chromium-driver
fi
python -m pip install -q -r requirements-dev.txt
python -m ruff check .
python -m ruff format --check .
python -m mypy
python -m pytest "$@"

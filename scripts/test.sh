#!/usr/bin/env bash
# Installs everything the test suite needs (Debian's Chromium for the browser tests, the pinned
# Python packages, phenoforge itself in editable mode), checks the code, then runs every test.
# The code checks come first and any failure stops the run, so pytest's closing line is the last
# thing printed: ruff (lint and format), mypy on the package, then pytest, which also runs the
# package's doctests and tests/test_boundaries.py (the import layering).
#
# `bash scripts/test.sh --quick` is the quick tier: the same checks, then only the tests marked neither
# browser, model nor slow (no Chromium install, no real model; under two minutes). CI runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ "${1:-}" == "--quick" ]]; then
    quick=1
    shift
fi
if [[ $quick == 0 ]] && { ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; }; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium chromium-driver
fi
python -m pip install -q -r requirements-dev.txt
python -m ruff check .
python -m ruff format --check .
python -m mypy
if [[ $quick == 1 ]]; then
    python -m pytest -m "not browser and not model and not slow" "$@"
else
    python -m pytest "$@"
fi

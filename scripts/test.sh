#!/usr/bin/env bash
# Installs everything the test suite needs (Debian's Chromium for the browser tests, the pinned
# Python packages) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium chromium-driver
fi
python -m pip install -q -r requirements-dev.txt
python -m pytest "$@"

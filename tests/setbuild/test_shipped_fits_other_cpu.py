"""A fresh build as another CPU would run it installs every shipped fit and gives the shipped figures.

Another CPU is simulated three ways at once (:mod:`phenoforge.simulated_cpu`): an AVX2 laptop's name and
flags, numpy and OpenBLAS on their AVX2 kernels, and ONNX Runtime on kernels that round a text's vector
otherwise in its last bits. The bundled benchmark must then equal the figures
``scripts/ship_fits.py`` shipped beside the fits (``reference_benchmark.json``), to three decimals.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phenoforge.eval.reference import differences, figures_of, read_figures, same_lists
from phenoforge.setbuild.shipped_fits import REFERENCE_FILE, SHIPPED_FITS_DIR, read_manifest
from phenoforge.simulated_cpu import as_avx2_laptop

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(1800)  # a build and a benchmark: minutes on a slower CPU
def test_a_fresh_build_on_another_cpu_installs_every_fit_and_gives_the_shipped_figures(tmp_path: Path) -> None:
    manifest = read_manifest()
    assert manifest is not None
    env = as_avx2_laptop(os.environ, tmp_path / "cpuinfo") | {
        "PHENOFORGE_DATA_DIR": str(tmp_path / "data"),
        "HF_HUB_OFFLINE": "1",
    }
    built = subprocess.run(
        [sys.executable, "-m", "phenoforge", "build", "--quiet"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=900,
        capture_output=True,
        text=True,
    )
    lines = [line for line in built.stdout.splitlines() if line.startswith("set builders for")]
    assert lines and all(": installed as shipped, fitted on" in line for line in lines), built.stdout
    document = subprocess.run(
        [sys.executable, "-m", "phenoforge", "benchmark", "--json", "--quiet"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=900,
        capture_output=True,
        text=True,
    ).stdout
    found = figures_of(json.loads(document))
    expected = read_figures(SHIPPED_FITS_DIR / REFERENCE_FILE)
    assert differences(expected, found) == []
    same, compared = same_lists(expected, found)
    assert compared > 0
    shipped = {f"shipped fit {fit.content_signature}" for fit in manifest.fits}
    fitted = [m for methods in found.libraries.values() for m in methods.values() if m.fits]
    assert fitted and all(m.fits in shipped for m in fitted)  # the report names the shipped fits it used
    print(f"{same} of {compared} library x method lists identical to the shipped reference")

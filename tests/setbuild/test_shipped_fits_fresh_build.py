"""A fresh ``build`` of this checkout (new vocabulary build, libraries and dense index, as on a new machine)
installs the shipped set-builder fits for every fit it needs instead of fitting them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from phenoforge.engine.curated import list_libraries
from phenoforge.engine.db import connect
from phenoforge.engine.dense import load_dense_if_ready
from phenoforge.methods.set_builder_fits import installed_fit_keys
from phenoforge.setbuild.api import fit_builders, fit_inputs, fits_refused, is_user_import
from phenoforge.setbuild.shipped_fits import content_signature, read_manifest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.model
def test_a_fresh_build_installs_every_shipped_fit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "PHENOFORGE_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    # minutes if a fit is not found (it is then made here): the lines below say which one
    done = subprocess.run(
        [sys.executable, "-m", "phenoforge", "build", "--quiet"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=900,
        capture_output=True,
        text=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("set builders for")]
    manifest = read_manifest()
    assert manifest is not None
    shipped = {fit.content_signature for fit in manifest.fits}
    con = connect(data / "vocab.duckdb")
    try:
        dense = load_dense_if_ready(con)
        assert dense is not None, "the build made no dense index"
        libraries = list_libraries(errors=[])
        bundled = [lib for lib in libraries if not is_user_import(lib)]
        keys = installed_fit_keys(libraries)
        for group, extra in keys:
            inputs = fit_inputs(con, dense, group, libraries, extra)
            signature = content_signature(con, inputs.train_libraries, bundled, dense, inputs.held_key)
            assert signature in shipped, f"held out {inputs.held_out}: no shipped fit for this build's inputs"
        assert len(lines) == len(keys) and all(": installed as shipped, fitted on" in line for line in lines), lines
        with fits_refused("every fit is stored now"):
            for group, extra in keys:
                fitted = fit_builders(con, dense, group, libraries, also_held_out=extra)
                assert fitted.model is not None and fitted.context_model is not None
    finally:
        con.close()

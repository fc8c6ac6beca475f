"""The fits shipped in the package were made by the fitting code and library versions of this checkout.

When this fails, a change reached code a fit runs (or a pinned version moved) after ``scripts/ship_fits.py``
last ran: a first run would ignore the shipped fits and fit for minutes. Run the two commands in that
script's docstring and commit ``phenoforge/setbuild/shipped_fits/``.
"""

from __future__ import annotations

import numpy as np
import sklearn

from phenoforge.setbuild.shipped_fits import PACKAGE_ROOT, code_digest, fit_source_files, read_archive, read_manifest

BUNDLED_GROUPS = ("charlson", "cms-hcc", "elixhauser")
"""the groups the bundled libraries declare (``phenoforge.libraries``): a fresh build fits without each"""


def test_the_shipped_fits_were_made_by_this_fitting_code() -> None:
    manifest = read_manifest()
    assert manifest is not None, "no shipped fits: run scripts/ship_fits.py"
    assert manifest.code_digest == code_digest(), (
        "code a fit runs changed since scripts/ship_fits.py ran: run it again (see its docstring)"
    )
    assert (manifest.sklearn_version, manifest.numpy_version) == (sklearn.__version__, np.__version__)


def test_the_shipped_archive_is_whole_and_covers_every_fit_a_fresh_build_makes() -> None:
    manifest = read_manifest()
    assert manifest is not None
    files = read_archive(manifest)  # every member checked against the manifest
    held_out = {tuple(fit.held_out) for fit in manifest.fits}
    assert held_out >= {(), *((group,) for group in BUNDLED_GROUPS)}
    for fit in manifest.fits:
        assert fit.fitted_file in files
        assert len(fit.model_directories) == 2  # the plain and the library-context membership models
        for directory in fit.model_directories:
            assert f"{directory}/manifest.json" in files and f"{directory}/model.onnx" in files


def test_the_code_digest_covers_the_fitting_code_and_not_the_dashboard() -> None:
    names = {path.relative_to(PACKAGE_ROOT).as_posix() for path in fit_source_files()}
    assert {"setbuild/learned.py", "setbuild/api.py", "engine/dense/retriever.py", "eval/matching.py"} <= names
    assert not any(name.startswith(("dashboard/", "cli/", "lists/", "agent/")) for name in names)
    assert "setbuild/shipped_fits.py" not in names

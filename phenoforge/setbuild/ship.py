"""Packing the set-builder fits a fresh ``build`` makes into the archive :mod:`.shipped_fits` installs from
(what ``scripts/ship_fits.py`` runs; kept apart so that installing never imports the fitting API)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb
import numpy as np

from phenoforge.engine.curated import Library
from phenoforge.setbuild.api import fit_builders, fit_inputs, is_user_import
from phenoforge.setbuild.model_store import models_dir
from phenoforge.setbuild.shipped_fits import (
    ARCHIVE_FILE,
    FORMAT_VERSION,
    MANIFEST_FILE,
    REFERENCE_FILE,
    ShippedFit,
    ShippedFitsError,
    ShippedFitsManifest,
    code_digest,
    content_signature,
)

__all__ = ["REFERENCE_FILE", "pack_shipped_fits"]


def pack_shipped_fits(
    con: duckdb.DuckDBPyConnection,
    dense: object | None,
    libraries: Sequence[Library],
    keys: Sequence[tuple[str | None, Sequence[str]]],
    out: Path,
    say: Callable[[str], object] = print,
) -> ShippedFitsManifest:
    """Fit (or reuse) the bundle of each (held-out group, further held-out groups) key and write the archive
    and manifest to ``out``; what ``scripts/ship_fits.py`` runs."""
    import sklearn

    bundled = [lib for lib in libraries if not is_user_import(lib)]
    files: dict[str, bytes] = {}
    fits: list[ShippedFit] = []
    for group, extra in keys:
        fitted = fit_builders(con, dense, group, libraries, also_held_out=extra)
        inputs = fit_inputs(con, dense, group, libraries, extra)
        path = models_dir() / f"fitted-{inputs.signature}.json"
        if not path.is_file():
            raise ShippedFitsError(f"held out {group}: the fit was not stored ({'; '.join(fitted.notes)})")
        stored = json.loads(path.read_text(encoding="utf-8"))
        directories = sorted(
            value
            for state in stored["states"].values()
            for key, value in state.items()
            if key.endswith("model_directory") and value is not None  # as an install reads them
        )
        files[path.name] = path.read_bytes()
        for directory in directories:
            for member in sorted((models_dir() / directory).iterdir()):
                files[f"{directory}/{member.name}"] = member.read_bytes()
        signature = content_signature(con, inputs.train_libraries, bundled, dense, inputs.held_key)
        fits.append(
            ShippedFit(
                content_signature=signature,
                held_out=inputs.held_out,
                training_libraries=inputs.names,
                fitted_file=path.name,
                model_directories=directories,
            )
        )
        say(f"held out {', '.join(inputs.held_out) or 'nothing'}: {path.name}, {len(directories)} models, {signature}")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as archive:
        for name in sorted(files):  # no times, owners or order of the folder: the same fits pack the same bytes
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
            archive.addfile(info, io.BytesIO(files[name]))
    data = buffer.getvalue()
    manifest = ShippedFitsManifest(
        format_version=FORMAT_VERSION,
        code_digest=code_digest(),
        sklearn_version=sklearn.__version__,
        numpy_version=np.__version__,
        archive=ARCHIVE_FILE,
        archive_sha256=hashlib.sha256(data).hexdigest(),
        files_sha256={name: hashlib.sha256(content).hexdigest() for name, content in sorted(files.items())},
        fits=fits,
        made_with="scripts/ship_fits.py",
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / ARCHIVE_FILE).write_bytes(data)
    (out / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=1) + "\n", encoding="utf-8")
    say(f"{len(fits)} bundles, {len(files)} files, {len(data) / 1e6:.2f} MB -> {out}")
    return manifest

"""The bundled libraries: which sources are built, and building (or keeping) them under the data folder.

``BUNDLED_SOURCES`` lists one entry per source module; a new source adds its specs there and its
folder names to ``BUNDLED_DIRS``. A library already built from the same source files, package
version and vocabulary build is kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

import phenoforge.libraries.ccc as ccc
import phenoforge.libraries.ccs as ccs
import phenoforge.libraries.cms_hcc as cms_hcc
import phenoforge.libraries.elixhauser as elixhauser
import phenoforge.libraries.quan as quan
from phenoforge.config import ProgressCallback, libraries_dir, no_progress
from phenoforge.engine.circe import parse_cohort
from phenoforge.engine.curated import MANIFEST, Library, LibraryManifest, load_library, write_library
from phenoforge.engine.db import build_id
from phenoforge.errors import LibraryError
from phenoforge.libraries.common import (
    FORMAT_VERSION,
    SourceLibrary,
    assemble_library,
    libraries_lock,
    now_iso,
    package_version,
)
from phenoforge.storage import sha256_file

BUNDLED_DIRS = (
    elixhauser.ELIXHAUSER_DIR,
    "cms-hcc-v28",
    "cms-hcc-v24",
    *(v.dir_name for v in quan.QUAN_VARIANTS),
    ccs.CCS_DIR,
    ccc.CCC_DIR,
)
"""The folders the bundled specs write, one per library (a new source adds its folder here)."""

RESERVED_DIRS = (*BUNDLED_DIRS, "ohdsi")
"""Library folders the set-up writes: an import there would be overwritten by the next build."""


@dataclass
class BundledSpec:
    """One bundled library: where it goes, the files it is read from, and its reader."""

    dir_name: str
    files: list[Path]
    package: str
    package_version: str
    read: Callable[[], SourceLibrary]


def bundled_specs(
    con: duckdb.DuckDBPyConnection,
    elixhauser_xlsx: Path | None = None,
    hcc_dx_csv: Path | None = None,
    hcc_labels_csv: Path | None = None,
    quan_csvs: dict[str, Path] | None = None,
    ccs_csv: Path | None = None,
    ccc_csv: Path | None = None,
) -> list[BundledSpec]:
    """Every bundled library in build order; source paths default to the installed packages' files."""
    xlsx = Path(elixhauser_xlsx) if elixhauser_xlsx is not None else elixhauser.elixhauser_xlsx_path()
    if hcc_dx_csv is None or hcc_labels_csv is None:
        default_dx, default_labels = cms_hcc.hcc_data_paths()
    dx = Path(hcc_dx_csv) if hcc_dx_csv is not None else default_dx
    labels = Path(hcc_labels_csv) if hcc_labels_csv is not None else default_labels
    specs = [
        BundledSpec(
            dir_name=elixhauser.ELIXHAUSER_DIR,
            files=[xlsx],
            package=elixhauser.ELIXHAUSER_PACKAGE,
            package_version=package_version(elixhauser.ELIXHAUSER_PACKAGE, elixhauser.ELIXHAUSER_PINNED),
            read=lambda: elixhauser.read_elixhauser(xlsx),
        )
    ]
    for version in cms_hcc.HCC_VERSIONS:
        specs.append(
            BundledSpec(
                dir_name=f"cms-hcc-{version.lower()}",
                files=[dx, labels],
                package=cms_hcc.HCC_PACKAGE,
                package_version=package_version(cms_hcc.HCC_PACKAGE, cms_hcc.HCC_PINNED),
                read=functools.partial(cms_hcc.read_cms_hcc, version, dx, labels),
            )
        )
    for variant in quan.QUAN_VARIANTS:
        given = (quan_csvs or {}).get(variant.dir_name)
        path = Path(given) if given is not None else quan.quan_csv_path(variant)
        specs.append(
            BundledSpec(
                dir_name=variant.dir_name,
                files=[path],
                package=quan.PYCOMORB_PACKAGE,
                package_version=package_version(quan.PYCOMORB_PACKAGE, quan.PYCOMORB_PINNED),
                read=functools.partial(quan.build_quan_source, con, variant, path),
            )
        )
    ccs_csv = Path(ccs_csv) if ccs_csv is not None else ccs.ccs_csv_path()
    specs.append(
        BundledSpec(
            dir_name=ccs.CCS_DIR,
            files=[ccs_csv],
            package=ccs.CCS_PACKAGE,
            package_version=package_version(ccs.CCS_PACKAGE, ccs.CCS_PINNED),
            read=functools.partial(ccs.build_ccs_source, con, ccs_csv),
        )
    )
    ccc_csv = Path(ccc_csv) if ccc_csv is not None else ccc.ccc_csv_path()
    specs.append(
        BundledSpec(
            dir_name=ccc.CCC_DIR,
            files=[ccc_csv],
            package=ccc.CCC_PACKAGE,
            package_version=package_version(ccc.CCC_PACKAGE, ccc.CCC_PINNED),
            read=functools.partial(ccc.read_ccc, ccc_csv),
        )
    )
    return specs


def _up_to_date(
    dest: Path, spec: BundledSpec, vocabulary_build: str, hashes: dict[Path, str]
) -> LibraryManifest | None:
    """The existing manifest when ``dest`` was built from these files for this vocabulary."""
    if not (dest / MANIFEST).is_file():
        return None
    try:
        library = load_library(dest)
    except LibraryError:
        return None
    build = library.manifest.report.get("build", {})
    expected = {path.name: hashes[path] for path in spec.files}
    if (
        build.get("format_version") == FORMAT_VERSION
        and build.get("vocabulary_build_id") == vocabulary_build
        and build.get("source_package_version") == spec.package_version
        and build.get("source_files") == expected
        and all(_readable_cohort(library, entry.cohort_id) for entry in library.manifest.cohorts)
    ):
        return library.manifest
    return None


def _readable_cohort(library: Library, cohort_id: str) -> bool:
    """A kept library's cohort file must still parse: a truncated or edited file is rebuilt, not trusted."""
    try:
        parse_cohort(library.definition(cohort_id))
    except (LibraryError, ValueError):
        return False
    return True


def build_bundled_libraries(
    con: duckdb.DuckDBPyConnection,
    root: Path | None = None,
    progress: ProgressCallback | None = None,
    force: bool = False,
    *,
    elixhauser_xlsx: Path | None = None,
    hcc_dx_csv: Path | None = None,
    hcc_labels_csv: Path | None = None,
    quan_csvs: dict[str, Path] | None = None,
    ccs_csv: Path | None = None,
    ccc_csv: Path | None = None,
) -> list[LibraryManifest]:
    """Build (or keep) the Elixhauser, CMS-HCC V28/V24, Quan Charlson/Elixhauser, AHRQ CCS and pediatric CCC
    libraries.

    A library already built from the same source files, package version and vocabulary build is
    kept; each one that is (re)built is written atomically. Source paths default to the files
    the installed packages ship; tests pass small synthetic ones (``quan_csvs`` by folder name).
    """
    root = Path(root) if root is not None else libraries_dir()
    report = progress or no_progress
    specs = bundled_specs(con, elixhauser_xlsx, hcc_dx_csv, hcc_labels_csv, quan_csvs, ccs_csv, ccc_csv)
    vocabulary_build = build_id(con)
    hashes = {path: sha256_file(path) for spec in specs for path in spec.files}
    manifests: list[LibraryManifest] = []
    with libraries_lock(root):
        for done, spec in enumerate(specs):
            dest = root / spec.dir_name
            kept = None if force else _up_to_date(dest, spec, vocabulary_build, hashes)
            if kept is not None:
                report(done + 1, len(specs), f"{spec.dir_name}: up to date")
                manifests.append(kept)
                continue
            report(done, len(specs), f"{spec.dir_name}: reading {spec.files[0].name}")
            manifest, definitions = assemble_library(con, spec.read(), now_iso())
            write_library(dest, manifest, definitions, replace=True, adopt_unmarked=True)
            report(
                done + 1,
                len(specs),
                f"{spec.dir_name}: {manifest.stats.n_cohorts} cohorts, "
                f"{manifest.stats.n_listed_codes} codes, "
                f"{manifest.stats.n_codes_not_in_vocabulary} not in the vocabulary",
            )
            manifests.append(manifest)
    return manifests


def ensure_bundled_libraries(
    con: duckdb.DuckDBPyConnection,
    root: Path | None = None,
    progress: ProgressCallback | None = None,
) -> list[LibraryManifest]:
    """First use: the bundled libraries, built if missing or stale, otherwise just read."""
    return build_bundled_libraries(con, root=root, progress=progress, force=False)

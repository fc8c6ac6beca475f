"""Set builders fitted before release and shipped with phenoforge, so a first run does not fit for minutes.

``scripts/ship_fits.py`` runs a fresh ``build`` (every fit it makes, each library group held out in turn
and none) and packs each fitted bundle here, named by a *content signature*: what the fit read, named by
content rather than by build (a fresh build's ids and times are new on every machine):

- the vocabulary's source package, version, release and schema;
- each training and knowledge library's manifest without its build time and build id, and its cohort files;
- the dense index's vectors and codes checksums, model, text recipe and precision, the query embedding's recipe
  (not the CPU) and the shipped query vectors (:mod:`phenoforge.engine.dense.shipped_queries`);
- the held-out key, the features, every recipe and format version, scikit-learn's and numpy's versions;
- a digest of the source of every module a fit runs (all of ``phenoforge`` but the dashboard, the CLI,
  the workbench and the agent): a changed retriever, feature or rule makes the shipped fits unusable
  until ``scripts/ship_fits.py`` is run again, and ``tests/setbuild/test_shipped_fits_current.py`` says so.

A bundle is installed only when its content signature equals the one computed here, and each file is
checked against the manifest's SHA-256; anything else (no archive, a damaged one, other code or data)
leaves the fit to be made locally, as before. Installing writes the membership models under names of their own
for this vocabulary build (:func:`installed_name`), with its id, each whole or not at all (a temporary sibling
that names the process, then a rename); names that would be written outside their model folder or outside
``data/models`` refuse the bundle. Nothing in ``data/models``
is replaced but a folder under an installed model's name that is not that model, whole (damaged, or left by a
build whose id starts alike): it is set aside, never read as this build's model.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from pydantic import BaseModel, ValidationError

from phenoforge.engine.curated import Library
from phenoforge.engine.db import read_metadata
from phenoforge.engine.expansion import Hierarchy
from phenoforge.errors import SettingError
from phenoforge.setbuild.learned import MANIFEST_FILE as MANIFEST_FILE_OF_MODEL
from phenoforge.setbuild.learned import MODEL_FILE, known_rule, known_variant
from phenoforge.setbuild.model_store import models_dir
from phenoforge.storage import remove_stale_temporaries, temporary_sibling

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_FITS_DIR = Path(__file__).resolve().parent / "shipped_fits"
"""Where the archive and its manifest live (read when a fit is looked up, so tests can point it elsewhere)."""
SHIPPED_FITS_ENV = "PHENOFORGE_SHIPPED_FITS"
"""Set to 0 to fit every set builder here instead of installing shipped fits (to reproduce or time them)."""
MANIFEST_FILE = "manifest.json"
ARCHIVE_FILE = "fits.tar.xz"
REFERENCE_FILE = "reference_benchmark.json"
"""The bundled benchmark's figures with these fits (``phenoforge.eval.reference``): any CPU must give the same."""
FORMAT_VERSION = 1

NOT_FIT_CODE = ("agent", "cli", "dashboard", "lists")
"""Subpackages no fit runs: their source is left out of the code digest (all other modules are in it)."""
NOT_FIT_MODULES = (
    "__main__.py",
    "app_state.py",
    "console.py",
    "csv_safe.py",
    "simulated_cpu.py",
    "setbuild/shipped_fits.py",
    "setbuild/ship.py",
)

VOLATILE_LIBRARY_FIELDS = ("created_at",)
"""Manifest fields a fresh build of the same library sets anew (beside ``report.build.vocabulary_build_id``)."""


class ShippedFit(BaseModel):
    """One fitted bundle in the archive."""

    content_signature: str
    held_out: list[str]
    training_libraries: list[str]
    fitted_file: str
    """the bundle's ``fitted-*.json`` as the build that made it stored it"""
    model_directories: list[str]
    """the membership models its states name (each a folder of the archive)"""


class ShippedFitsManifest(BaseModel):
    format_version: int
    code_digest: str
    sklearn_version: str
    numpy_version: str
    archive: str
    archive_sha256: str
    files_sha256: dict[str, str]
    """every member of the archive by name"""
    fits: list[ShippedFit]
    made_with: str


@dataclass
class ShippedBundle:
    """An installed bundle's fitted states (model folders renamed for this build), as ``fit_builders`` stores them."""

    training_libraries: list[str]
    states: dict[str, dict[str, Any]]
    notes: list[str]
    note: str
    signature: str
    """the bundle's content signature (the same on every machine that installs it)"""


class ShippedFitsError(Exception):
    """The archive or its manifest cannot be trusted (damaged, edited, truncated)."""


FIT_CHOICES_ENV = "PHENOFORGE_FIT_CHOICES"
"""``shipped`` (default): a fit made here takes the membership models' rule and tree variant that were chosen out
of fold on the same training groups when the shipped fits were made, and fits each model once (minutes saved);
``choose``: it chooses them again here by out-of-fold fits (what ``scripts/ship_fits.py`` does)."""


def fit_choices_mode() -> str:
    """``shipped`` or ``choose`` (``PHENOFORGE_FIT_CHOICES``; anything else is refused, not guessed)."""
    mode = os.environ.get(FIT_CHOICES_ENV, "shipped").strip().lower() or "shipped"
    if mode not in ("shipped", "choose"):
        raise SettingError(f"{FIT_CHOICES_ENV}={mode!r}: 'shipped' or 'choose'")
    return mode


def shipped_fits_enabled() -> bool:
    """Whether shipped fits may be installed (``PHENOFORGE_SHIPPED_FITS`` unset, or anything but 0/false/no/off)."""
    return os.environ.get(SHIPPED_FITS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def fit_source_files(root: Path = PACKAGE_ROOT) -> list[Path]:
    """Every module whose code can change what a fit learns, in a fixed order."""
    files = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.split("/")[0] in NOT_FIT_CODE or relative in NOT_FIT_MODULES:
            continue
        if not all(part.isidentifier() for part in path.relative_to(root).with_suffix("").parts):
            continue  # no module Python imports: an editor's lock (``.#api.py``) or backup, a copy (``api copy.py``)
        files.append(path)
    return files


@cache
def code_digest(root: Path = PACKAGE_ROOT) -> str:
    """SHA-256 over the fitting code's relative paths and bytes (one read per process)."""
    digest = hashlib.sha256()
    for path in fit_source_files(root):
        relative = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        digest.update(len(relative).to_bytes(8, "little") + relative)
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def library_content_stamp(library: Library) -> str:
    """A library's stamp without what a rebuild of the same library changes (its build time and the vocabulary
    build id it records)."""
    manifest = library.manifest.model_dump(mode="json")
    for name in VOLATILE_LIBRARY_FIELDS:
        manifest.pop(name, None)
    build = manifest.get("report", {}).get("build")
    if isinstance(build, dict):
        build.pop("vocabulary_build_id", None)
    return library.stamp(json.dumps(manifest, sort_keys=True))


def vocabulary_source(con: duckdb.DuckDBPyConnection) -> list[str | None]:
    """The source a vocabulary was built from (the same pinned package builds the same rows); not its build id."""
    metadata = read_metadata(con)
    return [metadata.get(key) for key in ("source", "source_version", "vocabulary_release", "schema_version")]


def dense_identity(dense: object | None) -> list[Any] | None:
    """The dense index's content (checksums of its vectors and codes), how queries are embedded (the embed
    function's recipe: model, runtime, precision, versions; not the CPU) and the shipped query vectors the
    cohort names are read from (the same on every CPU: :mod:`phenoforge.engine.dense.shipped_queries`)."""
    if dense is None:
        return None
    from phenoforge.engine.dense.model import embed_recipe
    from phenoforge.engine.dense.shipped_queries import shipped_queries_identity

    query_side = [embed_recipe(getattr(dense, "embed_fn", None)), shipped_queries_identity()]
    manifest = getattr(dense, "manifest", None)
    fields = ("format_version", "model", "text_recipe", "precision", "count", "vectors_sha256", "codes_sha256")
    if manifest is None:
        return ["no manifest", *query_side]
    return [*(getattr(manifest, name, None) for name in fields), *query_side]


def content_signature(
    con: duckdb.DuckDBPyConnection,
    train_libraries: Sequence[Library],
    knowledge_libraries: Sequence[Library],
    dense: object | None,
    held_key: str | None,
) -> str:
    """What a fit for these inputs learns from, by content: equal on two fresh builds of the same release."""
    import sklearn

    from phenoforge.setbuild import knowledge, learned
    from phenoforge.setbuild.builders import builder_classes

    parts = [
        FORMAT_VERSION,
        vocabulary_source(con),
        sorted((lib.library_id, library_content_stamp(lib)) for lib in train_libraries),
        sorted((lib.library_id, library_content_stamp(lib)) for lib in knowledge_libraries),
        dense_identity(dense),
        held_key,
        list(learned.ALL_FEATURE_NAMES),
        list(learned.MATRIX_COLUMNS),
        learned.FORMAT_VERSION,
        learned.RECIPE,
        knowledge.TRANSFER_VERSION,
        list(builder_classes()),  # a plug-in builder's code is not in the code digest
        sklearn.__version__,
        np.__version__,
        code_digest(),
    ]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


def read_manifest(folder: Path | None = None) -> ShippedFitsManifest | None:
    """The shipped manifest, None when nothing ships; ``ShippedFitsError`` when it cannot be read."""
    folder = SHIPPED_FITS_DIR if folder is None else folder
    path = folder / MANIFEST_FILE
    try:
        return ShippedFitsManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValidationError, ValueError, UnicodeDecodeError) as error:
        raise ShippedFitsError(f"{path}: unreadable ({str(error).splitlines()[0]})") from None


def read_archive(manifest: ShippedFitsManifest, folder: Path | None = None) -> dict[str, bytes]:
    """Every file of the archive by name, each checked against the manifest."""
    folder = SHIPPED_FITS_DIR if folder is None else folder
    path = folder / manifest.archive
    if not _plain_name(manifest.archive):  # only the shipped folder's own file: not ``../x`` nor ``/dev/zero``
        raise ShippedFitsError(f"{folder / MANIFEST_FILE}: the archive {manifest.archive!r} is not a file beside it")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ShippedFitsError(f"{path}: cannot be read ({error.strerror or error})") from None
    if hashlib.sha256(data).hexdigest() != manifest.archive_sha256:
        raise ShippedFitsError(f"{path}: checksum differs from the manifest (damaged or edited)")
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as archive:
            for member in archive.getmembers():
                if member.isfile():
                    handle = archive.extractfile(member)
                    if handle is not None:
                        files[member.name] = handle.read()
    except (tarfile.TarError, lzma.LZMAError, EOFError) as error:
        raise ShippedFitsError(f"{path}: not a readable archive ({error})") from None
    for name, expected in manifest.files_sha256.items():
        if name not in files:
            raise ShippedFitsError(f"{path}: {name} is missing")
        if hashlib.sha256(files[name]).hexdigest() != expected:
            raise ShippedFitsError(f"{path}: {name} differs from the manifest")
    return files


def install_shipped_models(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_libraries: Sequence[Library],
    knowledge_libraries: Sequence[Library],
    dense: object | None,
    held_key: str | None,
) -> ShippedBundle | None:
    """Install the membership models of the bundle shipped for exactly these inputs and return its states;
    None when none ships for them (or the archive cannot be trusted: the fit is then made here).
    :func:`why_not_shipped` says which."""
    found = _install_shipped_models(con, hierarchy, train_libraries, knowledge_libraries, dense, held_key)
    return found if isinstance(found, ShippedBundle) else None


def why_not_shipped(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_libraries: Sequence[Library],
    knowledge_libraries: Sequence[Library],
    dense: object | None,
    held_key: str | None,
) -> tuple[ShippedBundle | None, str]:
    """``install_shipped_models`` with the reason when nothing was installed ("" when it was)."""
    found = _install_shipped_models(con, hierarchy, train_libraries, knowledge_libraries, dense, held_key)
    return (found, "") if isinstance(found, ShippedBundle) else (None, found)


def _install_shipped_models(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_libraries: Sequence[Library],
    knowledge_libraries: Sequence[Library],
    dense: object | None,
    held_key: str | None,
) -> ShippedBundle | str:
    """The installed bundle, or why none was (said wherever a fit is then made here)."""
    if not shipped_fits_enabled():
        return f"{SHIPPED_FITS_ENV}=0: the shipped fits are not used"
    try:
        manifest = read_manifest()
    except ShippedFitsError as error:
        return f"the shipped fits cannot be read ({error}): reinstall phenoforge to restore them"
    if manifest is None:
        return f"no shipped fits ({SHIPPED_FITS_DIR / MANIFEST_FILE} is missing)"
    if manifest.format_version != FORMAT_VERSION:
        return f"the shipped fits are of format {manifest.format_version}, this version reads {FORMAT_VERSION}"
    try:
        here = code_digest()
    except OSError as error:  # a module that cannot be read: the code is not known to be the shipped fits' code
        return (
            f"the fitting code cannot be read ({error.strerror or error}), so it is not known to be the shipped fits'"
        )
    if manifest.code_digest != here:
        return (
            f"the fitting code differs from the code the fits were shipped with (digest {here[:12]}, shipped "
            f"{manifest.code_digest[:12]}): run scripts/ship_fits.py to ship them again"
        )
    try:
        signature = content_signature(con, train_libraries, knowledge_libraries, dense, held_key)
    except (duckdb.Error, OSError, ValueError, TypeError) as error:  # an odd vocabulary or library
        return f"what this fit reads could not be named ({type(error).__name__}: {error})"
    entry = next((fit for fit in manifest.fits if fit.content_signature == signature), None)
    if entry is None:
        return (
            f"no fit ships for these libraries, vocabulary and dense vectors (content signature {signature}; "
            "another vocabulary, a library imported or changed, another embedding model)"
        )
    try:
        files = read_archive(manifest)
        stored = _ShippedFitted.model_validate_json(files[entry.fitted_file])
        for name in entry.model_directories:  # every model checked before one is written: all or nothing
            _model_members(files, name, hierarchy.build_id)
        renamed = {name: installed_name(name, hierarchy.build_id) for name in entry.model_directories}
        for state in stored.states.values():
            for key, value in state.items():
                if key.endswith("model_directory") and value is not None and value not in renamed:
                    raise ShippedFitsError(f"{entry.fitted_file}: {key} names {value!r}, a model it does not ship")
        for name, target in renamed.items():
            _install_model(files, name, models_dir() / target, hierarchy.build_id)
    except (ShippedFitsError, KeyError, ValueError, TypeError, OSError) as error:
        return f"the shipped fit {signature} cannot be installed ({type(error).__name__}: {error})"
    for state in stored.states.values():
        for key, value in list(state.items()):
            if isinstance(value, str) and value in renamed:
                state[key] = renamed[value]
    return ShippedBundle(
        training_libraries=stored.training_libraries,
        states=stored.states,
        notes=stored.notes,
        note=f"installed the set builders fitted on {', '.join(entry.training_libraries)} shipped with phenoforge "
        f"(same code, libraries, vocabulary release and dense vectors; {signature})",
        signature=signature,
    )


def shipped_choices(training_libraries: Sequence[str]) -> dict[str, Any]:
    """The choices made out of fold when the shipped fit on the same training libraries (so with the same groups
    held out) was made, as ``Training.choices`` holds them: ``{"learned": {"model": {...}, "context_model": {...}}}``
    with each model's rule, threshold, variant and where they were chosen. Empty when none ships for them, when
    ``PHENOFORGE_FIT_CHOICES=choose``, or when the archive cannot be trusted (the fit then chooses them here)."""
    if fit_choices_mode() == "choose":
        return {}
    try:
        manifest = read_manifest()
        if manifest is None:
            return {}
        wanted = sorted(training_libraries)
        entry = next((fit for fit in manifest.fits if sorted(fit.training_libraries) == wanted), None)
        if entry is None:
            return {}
        choices: dict[str, Any] = json.loads(
            _choices_in_archive(SHIPPED_FITS_DIR, manifest.model_dump_json(), entry.fitted_file)
        )
        same_code = manifest.code_digest == code_digest()
    except SettingError:
        raise
    except (ShippedFitsError, KeyError, ValueError, TypeError, OSError):
        return {}
    for part in choices.get("learned", {}).values():
        part["code"] = "same" if same_code else "other"
        if not same_code:  # the features may have changed since: say so wherever the choice is named
            part["chosen_on"] += (
                "; by fitting code other than this checkout's (PHENOFORGE_FIT_CHOICES=choose makes them here)"
            )
    return choices


@cache
def _choices_in_archive(folder: Path, manifest_json: str, fitted_file: str) -> str:
    """``shipped_choices`` of one bundle as JSON (the archive is read once per process and manifest)."""
    manifest = ShippedFitsManifest.model_validate_json(manifest_json)
    files = read_archive(manifest, folder)
    stored = _ShippedFitted.model_validate_json(files[fitted_file])
    learned = stored.states.get("learned", {})
    parts: dict[str, Any] = {}
    for part, key in (("model", "model_directory"), ("context_model", "context_model_directory")):
        name = learned.get(key)
        if not isinstance(name, str):
            continue
        made = json.loads(files[f"{name}/{MANIFEST_FILE_OF_MODEL}"])
        parts[part] = {
            "rule": known_rule(str(made["rule"])),
            "threshold": float(made["threshold"]),
            "variant": known_variant(str(made["variant"])),
            "chosen_on": f"{made['threshold_chosen_on']}, when the shipped fits were made (reused: the same "
            "training groups)",
        }
    return json.dumps({"learned": parts} if parts else {})


class _ShippedFitted(BaseModel):
    """What an install reads of a shipped ``fitted-*.json`` (anything else in it is the stored fit's own)."""

    training_libraries: list[str]
    states: dict[str, dict[str, Any]]
    notes: list[str] = []


_FIT_MODEL_DIRECTORY = re.compile(r"membership-[0-9a-f]{12}(?P<key>-[0-9a-f]{12}-k[0-9a-f]{10})")
"""a model folder ``fit_builders`` names: model digest, then the examples' and the knowledge's key"""


def installed_name(name: str, build_id: str) -> str:
    """The folder shipped model ``name`` is installed in for vocabulary build ``build_id``: a name of its own in
    the form of a fit's model folder (same examples' and knowledge's key), so ``prune`` knows it, keeps it while
    this build's installed fit names it and removes it once another vocabulary build is current."""
    match = _FIT_MODEL_DIRECTORY.fullmatch(name)
    if match is None:
        raise ShippedFitsError(f"{name!r} is not the name of a fit's model folder")
    own = hashlib.sha1(json.dumps([name, build_id]).encode()).hexdigest()[:12]
    return f"membership-{own}{match['key']}"


def _plain_name(name: str) -> bool:
    """One file or folder name: no separator, not ``.`` or ``..``, not hidden (staging folders and locks are)."""
    return name not in ("", ".", "..") and not name.startswith(".") and not any(c in name for c in "/\\\0")


def _model_members(files: Mapping[str, bytes], name: str, build_id: str) -> dict[str, bytes]:
    """The files of model folder ``name`` by file name, its manifest rewritten for vocabulary build ``build_id``;
    ``ShippedFitsError`` for a name that would be written outside ``data/models``, or other files than a model's."""
    if not _plain_name(name):
        raise ShippedFitsError(f"{name!r} is not a model folder's name")
    members = {key[len(name) + 1 :]: data for key, data in files.items() if key.startswith(f"{name}/")}
    # a membership model's two files and nothing else (``../x``, ``/x`` or a stray file would land elsewhere,
    # or make a folder ``prune`` leaves alone for good)
    unexpected = sorted(set(members) - {MANIFEST_FILE_OF_MODEL, MODEL_FILE})
    if unexpected:
        raise ShippedFitsError(f"{name}: {unexpected[0]!r} is not a file of a membership model")
    for wanted in (MANIFEST_FILE_OF_MODEL, MODEL_FILE):
        if wanted not in members:
            raise ShippedFitsError(f"{name} has no {wanted}")
    manifest = json.loads(members[MANIFEST_FILE_OF_MODEL])
    if not isinstance(manifest, dict):
        raise ShippedFitsError(f"{name}: the manifest is not an object")
    manifest["vocabulary_build_id"] = build_id
    members[MANIFEST_FILE_OF_MODEL] = json.dumps(manifest, indent=1).encode()
    return members


def _holds(target: Path, members: Mapping[str, bytes]) -> bool:
    """Whether ``target`` is this model's folder, whole: these files with these bytes, and no other."""
    try:
        if sorted(path.name for path in target.iterdir()) != sorted(members):
            return False
        return all((target / relative).read_bytes() == data for relative, data in members.items())
    except OSError:
        return False


def _install_model(files: Mapping[str, bytes], name: str, target: Path, build_id: str) -> None:
    """Write one membership model's folder under ``target`` for vocabulary build ``build_id``, whole or not at all.

    A folder already there that is not this model, whole (damaged, or left by another build whose id starts
    alike), is set aside and replaced: it is never read as this build's model."""
    members = _model_members(files, name, build_id)
    if _holds(target, members):
        return  # installed before for this build (another process, or an earlier run)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target.parent)  # what a killed installer left (its name says its process)
    staging = temporary_sibling(target)
    staging.mkdir()
    try:
        for relative, data in members.items():
            with open(staging / relative, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        try:
            staging.rename(target)
            return
        except OSError:
            if _holds(target, members):  # a concurrent installer was first
                return
        aside = temporary_sibling(target, "old")
        aside.mkdir()
        try:
            with contextlib.suppress(FileNotFoundError):  # another installer set it aside first
                target.rename(aside / target.name)
            try:
                staging.rename(target)
            except OSError:
                if not _holds(target, members):  # not a concurrent installer: a real failure
                    raise
        finally:
            shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

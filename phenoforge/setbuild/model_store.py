"""Stored membership models: where they live, their manifest and ONNX trees on disk, reuse or retrain.

A model is stored under ``data/models/<name>/`` with a manifest (training libraries and cohorts, features,
vocabulary build, version, checksum) and reused until it is stale or corrupt; one writer at a time per
model across threads and processes. The trees read back are kept per process (``ProcessCache``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import duckdb
from pydantic import ValidationError

from phenoforge.caches import ProcessCache
from phenoforge.config import data_dir
from phenoforge.engine.expansion import Hierarchy
from phenoforge.locks import lock_if_writable
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.learned import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    MATRIX_COLUMNS,
    MIN_TRAINING_COHORTS,
    MIN_TRAINING_POSITIVES,
    MODEL_FILE,
    RECIPE,
    VARIANTS,
    MembershipModel,
    ModelError,
    ModelManifest,
    default_features,
    requested_variant,
    train_membership_model,
    training_digest,
)
from phenoforge.setbuild.trees import TreeEnsemble, TreeFileError
from phenoforge.storage import remove_stale_temporaries, temporary_sibling


def models_dir() -> Path:
    return data_dir() / "models"


def model_name(
    training_libraries: Sequence[str],
    features: Sequence[str],
    with_dense: bool,
    rule: tuple[str, float] | None = None,
    variant: str | None = None,
) -> str:
    key = [sorted(training_libraries), list(features), with_dense, FORMAT_VERSION, RECIPE]
    if rule is not None:
        key.append(list(rule))
    wanted = requested_variant(rule, variant)  # "rule, no variant" and "rule, free": one model, one name
    if wanted is not None:
        key.append(wanted)
    digest = hashlib.sha1(json.dumps(key).encode()).hexdigest()[:12]
    return f"membership-{digest}"


def save_model(model: MembershipModel, directory: Path) -> Path:
    """Write model and manifest atomically (a temporary sibling, then a rename).

    Both siblings name this process, so the next writer removes what a killed one left behind.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(directory.parent)
    tmp = temporary_sibling(directory)
    old = temporary_sibling(directory, "old")
    try:
        tmp.mkdir(parents=True)
        (tmp / MODEL_FILE).write_bytes(model.trees.data)
        model.manifest.sha256 = hashlib.sha256(model.trees.data).hexdigest()  # the bytes just written
        (tmp / MANIFEST_FILE).write_text(model.manifest.model_dump_json(indent=1), encoding="utf-8")
        if directory.exists():
            os.replace(directory, old)
        os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return directory


_KEPT_TREES = 8

_TREES: ProcessCache[tuple[str, int, int, str, int], TreeEnsemble] = ProcessCache(
    "model trees", max_entries=_KEPT_TREES
)
_TREES_LOCK = threading.Lock()


def _read_trees(model_path: Path, sha256: str, width: int) -> TreeEnsemble:
    """The stored trees of ``model_path``, checked against the manifest's checksum and feature count.

    Kept per process while the file is unchanged (same size and modification time, same checksum in the
    manifest): a benchmark reads one fitted bundle per scored library, and libraries of one group read
    the same models.
    """
    try:
        stat = model_path.stat()
    except FileNotFoundError:
        raise ModelError(f"{model_path}: missing or corrupt (checksum does not match the manifest)") from None
    except OSError as error:
        raise ModelError(f"{model_path}: cannot be read ({error.strerror or error})") from None
    key = (str(model_path.resolve()), stat.st_size, stat.st_mtime_ns, sha256, width)
    with _TREES_LOCK:
        known = _TREES.get(key)
    if known is not None:
        return known
    try:
        data = model_path.read_bytes() if model_path.is_file() else b""
    except OSError as error:
        raise ModelError(f"{model_path}: cannot be read ({error.strerror or error})") from None
    if not data or hashlib.sha256(data).hexdigest() != sha256:
        raise ModelError(f"{model_path}: missing or corrupt (checksum does not match the manifest)")
    try:  # the checksum only says the manifest and the file agree: the file itself is checked too
        trees = TreeEnsemble(data, width)
    except TreeFileError as error:
        raise ModelError(f"{model_path}: {error}") from None
    with _TREES_LOCK:
        _TREES.remember(key, trees)
    return trees


def load_model(directory: Path, vocabulary_build_id: str) -> MembershipModel:
    """The stored model, or ``ModelError`` saying why it cannot be used (missing, corrupt, stale)."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST_FILE
    try:
        manifest = ModelManifest.model_validate_json(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{manifest_path}: no stored model") from None
    except OSError as error:  # data/models is a file, or not readable
        raise ModelError(f"{manifest_path}: cannot be read ({error.strerror or error})") from None
    except ValidationError as error:  # name the field and what is wrong with it, not only the error count
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "manifest"
        raise ModelError(f"{manifest_path}: corrupt model manifest ({where}: {first['msg']})") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise ModelError(f"{manifest_path}: corrupt model manifest ({str(error).splitlines()[0]})") from None
    if manifest.format_version != FORMAT_VERSION:
        raise ModelError(f"{directory}: model format {manifest.format_version}, this version reads {FORMAT_VERSION}")
    if manifest.vocabulary_build_id != vocabulary_build_id:
        raise ModelError(
            f"{directory}: trained on vocabulary build {manifest.vocabulary_build_id}, the database is build "
            f"{vocabulary_build_id}; the model must be retrained"
        )
    unknown = [name for name in manifest.features if name not in MATRIX_COLUMNS]
    if unknown:
        raise ModelError(f"{directory}: the model uses features this version does not compute ({unknown[:3]})")
    if Path(manifest.model_file).name != manifest.model_file:
        raise ModelError(f"{manifest_path}: names a model file outside its folder ({manifest.model_file!r})")
    trees = _read_trees(directory / manifest.model_file, manifest.sha256, len(manifest.features))
    return MembershipModel(manifest, trees)


def ensure_model(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    examples: Sequence[Example],
    features: Sequence[str] | None = None,
    with_dense: bool = True,
    directory: Path | None = None,
    min_cohorts: int = MIN_TRAINING_COHORTS,
    min_positives: int = MIN_TRAINING_POSITIVES,
    rule: tuple[str, float] | None = None,
    variant: str | None = None,
    given_by: str | None = None,
) -> tuple[MembershipModel, list[str]]:
    """Reuse the stored model trained on exactly these examples' libraries, else train and store one.

    Returns the model and notes saying what happened (reused, or rebuilt and why). Raises
    ``TrainingDataTooSmall`` when the examples cannot train one.
    """
    features = default_features(examples) if features is None else features
    libraries = sorted({ex.library_id for ex in examples})
    if directory is None:
        directory = models_dir() / model_name(libraries, features, with_dense, rule, variant)
    directory = Path(directory)
    # one writer per model across threads and processes: the second finds the first one's model and reuses it
    with _writer_lock(directory.with_name(f".{directory.name}.lock")):
        return _ensure_model_locked(
            con,
            hierarchy,
            examples,
            features,
            with_dense,
            directory,
            min_cohorts,
            min_positives,
            rule,
            libraries,
            variant,
            given_by,
        )


def request_mismatch(manifest: ModelManifest, rule: tuple[str, float] | None, variant: str | None) -> str | None:
    """Why a stored model is not what this call asks for (``None``: it is).

    A given rule without a variant asks for free trees; a call that gives neither asks for both chosen
    out of fold among every variant, which a model fitted for a caller's rule or variant was not.
    """
    if rule is not None and (manifest.rule, manifest.threshold) != tuple(rule):
        return f"its selection rule is {manifest.rule} {manifest.threshold}, not {rule[0]} {rule[1]}"
    if rule is None and not manifest.variants_compared:
        return "its selection rule was given by a caller, not chosen out of fold"
    wanted = requested_variant(rule, variant)
    if wanted is not None and manifest.variant != wanted:
        return f"its trees are {manifest.variant}, not {wanted}"
    if rule is None and variant is None and sorted(manifest.variants_compared) != sorted(VARIANTS):
        return f"its variant was chosen among {', '.join(manifest.variants_compared)} only, not every variant"
    return None


def _ensure_model_locked(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    examples: Sequence[Example],
    features: Sequence[str],
    with_dense: bool,
    directory: Path,
    min_cohorts: int,
    min_positives: int,
    rule: tuple[str, float] | None,
    libraries: list[str],
    variant: str | None = None,
    given_by: str | None = None,
) -> tuple[MembershipModel, list[str]]:
    notes: list[str] = []
    try:
        model = load_model(directory, hierarchy.build_id)
        same_cohorts = sorted(model.manifest.training_cohorts) == sorted(ex.key for ex in examples if len(ex.table))
        same_rows = same_cohorts and model.manifest.training_digest == training_digest(examples, features)
        same_fit = (
            model.manifest.training_libraries == libraries
            and model.manifest.features == list(features)
            and model.manifest.with_dense == with_dense
            and model.manifest.recipe == RECIPE
            and same_rows
        )
        mismatch = request_mismatch(model.manifest, rule, variant)
        if same_fit and mismatch is None:
            notes.append(f"reused model {directory.name} (trained on {', '.join(libraries)})")
            return model, notes
        if same_fit:
            notes.append(f"stored model {directory.name} was fitted on the same data, but {mismatch}: retrained")
        elif same_cohorts and not model.manifest.training_digest:
            notes.append(
                f"stored model {directory.name} predates the training digest (what it was fitted on cannot "
                "be checked): retrained"
            )
        elif same_cohorts and not same_rows:
            notes.append(
                f"stored model {directory.name} was trained on the same cohorts but other rows (candidates, "
                "features, curated codes or library groups changed): retrained"
            )
        else:
            notes.append(f"stored model {directory.name} was trained on other data: retrained")
    except ModelError as error:
        if (directory / MANIFEST_FILE).exists():
            notes.append(f"stored model unusable, retrained: {error}")
    model = train_membership_model(
        con, hierarchy, examples, features, with_dense, min_cohorts, min_positives, rule, variant, given_by
    )
    notes.append(f"trained model {directory.name} on {', '.join(libraries)} ({model.manifest.n_rows} candidates)")
    try:
        save_model(model, directory)
    except OSError as error:
        notes.append(not_stored(directory, error))
    return model, notes


def not_stored(path: Path, error: OSError) -> str:
    """The note for a fitted piece that could not be written: it serves this run, and is fitted again next time."""
    return (
        f"{path.name} not stored ({error.strerror or error}): fitted for this run only; "
        f"make {path.parent} a writable folder to keep it"
    )


def _writer_lock(lock_path: Path) -> AbstractContextManager[None]:
    """The model's writer lock; none when data/models cannot be written (nothing will be stored then)."""
    return lock_if_writable(lock_path)

"""Stale files under ``data/models``: what the current state reads, what nothing reads any more, and removing it.

Every vocabulary build, library edit, dense index rebuild, package upgrade or CPU change leaves another
generation of derived files under ``data/models`` (a node table is 26 MB, the ONNX export 87 MB). A file is
**current** when the current state would read it:

- ``node-table-<build>-v<format>.npz``, ``word-counts-<build>-v<format>.json``: the vocabulary's build id and
  this version's format;
- ``curated-knowledge-<build>-<key>-v<format>.npz``: the key of the installed bundled libraries' stamps and
  of the dense index's embedding (or of none: ``--no-dense`` reads that one);
- ``fitted-<signature>.json``: the signature of a fit ``build`` makes (every installed library's group, and
  free queries) or a benchmark of an installed library makes, with the dense index as it is and without it;
  the ``membership-*`` model folder such a bundle names (and its ``.lock``), and the
  ``builder-params-*.json`` it was tuned with;
- ``all-MiniLM-L6-v2-<package>-torch<version>-opset<n>.onnx`` (and its ``-int8`` version and ``.lock``): the
  installed model package and torch.

Everything else phenoforge recognises is **stale** and removed, except what is in use: a membership model
or ONNX export whose lock another process holds (it is being written), or a temporary of a process that
still runs. When a fit's bundle is missing (``build --no-fit``, or a fit that has not run yet) the
pruner cannot tell which model folder and parameters that fit would reuse: it then removes those only when
they were made for another vocabulary build. Files and folders it does not recognise, and symbolic links,
are left alone and listed. Nothing outside ``data/models`` is touched.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from phenoforge.artifacts import MODELS, ONNX_TEMPORARY, Artifact, entry_size, find_artifact
from phenoforge.config import data_dir
from phenoforge.storage import process_alive, temporary_owner


class PruneError(Exception):
    """``data/models`` cannot be pruned at all (not readable, a link, no vocabulary to tell what is current)."""


@dataclass
class CurrentState:
    """What the current state reads under ``data/models`` (``current_state`` finds it)."""

    build_id: str
    names: set[str] = field(default_factory=set)
    """names of files and folders directly under data/models that the current state reads"""
    fits_known: bool = True
    """every fit's bundle was found: a fitted bundle, membership folder or parameters file none names is stale"""
    params_known: bool = True
    """every found bundle names a model folder, which says which parameters file it was tuned with"""
    params_fits: list[tuple[str, bool]] = field(default_factory=list)
    """(model folder, with dense) of each found fit: a parameters file is current when one of them made it"""
    knowledge_known: bool = True
    """the embedding's identity is known, so the current curated-knowledge files are named"""
    notes: list[str] = field(default_factory=list)
    """what could not be told, and so was kept"""


@dataclass
class Entry:
    """One file or folder under data/models, with its size and why it is removed or kept."""

    name: str
    kind: str
    size: int
    reason: str
    lock: str | None = None
    """the lock file a writer holds while it writes this (removed with it, while the pruner holds it)"""
    companions: list[str] = field(default_factory=list)
    """further names removed with it (its lock file)"""


@dataclass
class PrunePlan:
    directory: Path
    stale: list[Entry] = field(default_factory=list)
    current: list[Entry] = field(default_factory=list)
    in_use: list[Entry] = field(default_factory=list)
    unknown: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def stale_bytes(self) -> int:
        return sum(entry.size for entry in self.stale)


@dataclass
class PruneResult:
    plan: PrunePlan
    removed: list[Entry] = field(default_factory=list)
    failed: list[tuple[Entry, str]] = field(default_factory=list)
    dry_run: bool = False

    @property
    def freed(self) -> int:
        return sum(entry.size for entry in self.removed)


def models_directory() -> Path:
    return data_dir() / "models"


# -- what is current ------------------------------------------------------------------------------------


def current_state(con: duckdb.DuckDBPyConnection, dense: object | None) -> CurrentState:
    """The names under data/models the current state reads: this vocabulary build, the installed libraries,
    ``dense`` (the dense retriever commands load, None without a ready index), the installed packages.

    Reads stamps and stored fitted bundles only: nothing is fitted, embedded or written.
    """
    from phenoforge.engine.curated import list_libraries
    from phenoforge.engine.dense.model import onnx_model_file
    from phenoforge.engine.expansion import get_hierarchy
    from phenoforge.methods.set_building import current_fit_files
    from phenoforge.setbuild.api import knowledge_identity
    from phenoforge.setbuild.nodes import node_table_path
    from phenoforge.setbuild.robust import word_counts_path
    from phenoforge.setbuild.transfer import embed_identity_of, knowledge_path

    hierarchy = get_hierarchy(con)
    build = hierarchy.build_id
    state = CurrentState(build, {node_table_path(build).name, word_counts_path(build).name})
    onnx = onnx_model_file()
    state.names |= {onnx.name, f"{onnx.stem}-int8.onnx", onnx.with_suffix(".lock").name}
    libraries = list_libraries(errors=[])
    stamps, _groups = knowledge_identity(libraries)
    state.names.add(knowledge_path(build, stamps, "no embedding").name)
    embedding_known = True
    if dense is not None and not onnx.is_file():
        # the embedding's identity would export the model again (87 MB) just to be named: keep every knowledge.
        # The fits made with the index are still named (their signature reads the index's build, not the export)
        state.knowledge_known = embedding_known = False
        state.notes.append(
            f"the sentence model's ONNX export ({onnx.name}) is missing, so which curated-knowledge file the dense "
            "index's embedding reads is not known: kept those of this vocabulary build"
        )
    elif dense is not None:
        identity = embed_identity_of(dense)
        if identity is None:
            state.knowledge_known = False
            state.notes.append("the dense index's embedding declares no identity: kept this build's curated knowledge")
        else:
            state.names.add(knowledge_path(build, stamps, identity).name)
    # the fits of the state commands run in (dense as loaded) decide; those without the dense index
    # (``--no-dense``) are kept when they are there
    variants: list[object | None] = [dense, None] if dense is not None else [None]
    missing: list[str] = []
    for position, variant in enumerate(variants):
        fits, unknown = current_fit_files(con, hierarchy, variant, libraries, embedding_known=embedding_known)
        for fit in fits:
            if not fit.found:
                if position == 0:
                    state.fits_known = False
                    missing.append(f"{fit.held_out or 'free queries'} ({fit.fitted})")
                continue
            state.names.add(fit.fitted)
            if fit.context_model_directory is not None:
                state.names |= {fit.context_model_directory, f".{fit.context_model_directory}.lock"}
            if fit.model_directory is not None:
                state.names |= {fit.model_directory, f".{fit.model_directory}.lock"}
                state.params_fits.append((fit.model_directory, variant is not None))
            elif position == 0:
                state.params_known = False
        if position == 0 and unknown:
            state.fits_known = False
            state.notes += [f"{note}: kept this build's fits" for note in unknown]
    if missing:
        state.notes.append(
            f"the set builders are not fitted for {', '.join(dict.fromkeys(missing))}: kept every membership model, "
            "fitted bundle and tuned parameters of this vocabulary build (`python -m phenoforge build` fits them)"
        )
    if not state.params_known:
        state.notes.append(
            "a fitted bundle names no membership model (too little training data), so which tuned parameters it "
            "read is not known: kept those of this vocabulary build"
        )
    state.notes = list(dict.fromkeys(state.notes))
    return state


# -- what is stale ---------------------------------------------------------------------------------------


def plan_prune(directory: Path, state: CurrentState) -> PrunePlan:
    """Sort every entry of ``directory`` (data/models) into stale, current, in use and not recognised.

    Reads names, sizes, small JSON manifests and (without waiting) lock files; writes nothing.
    """
    directory = Path(directory)
    if directory.is_symlink():
        raise PruneError(f"{directory} is a symbolic link (to {os.readlink(directory)}): not pruned through it")
    if not directory.exists():
        return PrunePlan(directory, notes=[f"{directory} does not exist: nothing to prune"])
    if not directory.is_dir():
        raise PruneError(f"{directory} is not a folder")
    try:
        children = sorted(directory.iterdir(), key=lambda path: path.name)
    except OSError as error:
        raise PruneError(f"{directory} cannot be read ({error.strerror or error})") from None
    plan = PrunePlan(directory, notes=list(state.notes))
    names = {child.name for child in children}
    claimed: set[str] = set()  # lock files sorted with what they lock
    entries: list[tuple[Entry, str]] = []
    for child in children:
        name = child.name
        if name in claimed:
            continue
        if child.is_symlink():
            entries.append((Entry(name, "symbolic link", 0, "a symbolic link: left alone"), "unknown"))
            continue
        entry, verdict = _classify(child, state, names)
        if entry.lock is not None and entry.lock != name and entry.lock in names:
            entry.companions.append(entry.lock)
            claimed.add(entry.lock)
        entries.append((entry, verdict))
    for entry, verdict in entries:
        if entry.name in claimed and verdict != "stale":
            continue  # a lock listed with its model or export
        if verdict == "stale" and entry.lock is not None and lock_is_held(directory / entry.lock):
            entry.reason = _held_reason(entry)
            verdict = "in_use"
        entry.size = sum(entry_size(directory / name) for name in [entry.name, *entry.companions])
        getattr(plan, verdict).append(entry)
    return plan


def _classify(path: Path, state: CurrentState, names: set[str]) -> tuple[Entry, str]:
    """(entry, "stale" | "current" | "in_use" | "unknown") for one entry of data/models."""
    name = path.name
    build = state.build_id
    current = name in state.names

    def stale(kind: str, reason: str, lock: str | None = None) -> tuple[Entry, str]:
        return Entry(name, kind, 0, reason, lock), "stale"

    def kept(kind: str, reason: str = "read by the current state", lock: str | None = None) -> tuple[Entry, str]:
        return Entry(name, kind, 0, reason, lock), "current"

    onnx_temporary = ONNX_TEMPORARY.match(name)
    pid = int(onnx_temporary["pid"]) if onnx_temporary else temporary_owner(name)
    if pid is not None:
        if process_alive(pid):
            return Entry(name, "temporary", 0, f"being written by process {pid}"), "in_use"
        return stale("temporary", f"left by process {pid}, which no longer runs")
    found = find_artifact(MODELS, name, path.is_dir())
    if found is None:  # only what a description names is ever removed
        return Entry(name, "not recognised", entry_size(path), "not a file phenoforge makes"), "unknown"
    artifact, match = found
    kind = artifact.kind
    if kind in ("node table", "word counts"):
        if current:
            return kept(kind)
        return stale(kind, _generation(match["build"], int(match["format"]), build, _format_of(artifact)))
    if kind == "curated knowledge":
        if current:
            return kept(kind)
        if match["build"] != build or int(match["format"]) != _format_of(artifact):
            return stale(kind, _generation(match["build"], int(match["format"]), build, None))
        if state.knowledge_known:
            return stale(kind, "made for other library contents or another embedding")
        return kept(kind, "of this vocabulary build (which one is current is not known)")
    if kind == "fitted builders":
        if current:
            states = _json_field(path, "states")
            held = ", ".join(states) if isinstance(states, dict) else "no readable builder states"
            return kept(kind, f"read by the current state; the fitted {held}")
        if state.fits_known:
            return stale(kind, "no current fit has this signature (other libraries, index or build)")
        made_for = _json_field(path, "vocabulary_build_id")
        if made_for and made_for != build:
            return stale(kind, f"fitted on vocabulary build {made_for}")
        return kept(kind, "of this vocabulary build, kept while a fit is missing")
    if kind == "tuned parameters":
        if current or _params_current(path, state):
            return kept(kind)
        made_for = _json_field(path, "vocabulary_build_id")
        if made_for and made_for != build:
            return stale(kind, f"tuned on vocabulary build {made_for}")
        if state.fits_known and state.params_known:
            return stale(kind, "no current fit was tuned with it")
        return kept(kind, "of this vocabulary build, kept while a fit is missing or names no model")
    if kind == "membership model":
        lock = f".{name}.lock"
        if current:
            return kept(kind, lock=lock)
        contents = _folder_names(path)
        if contents is None or not contents <= {"model.onnx", "model.pkl", "manifest.json"}:  # pkl: format 1
            return Entry(name, kind, 0, "holds files phenoforge does not write there: left alone"), "unknown"
        made_for = _json_field(path / "manifest.json", "vocabulary_build_id")
        format_version = _json_field(path / "manifest.json", "format_version")
        if made_for and made_for != build:
            return stale(kind, f"trained on vocabulary build {made_for}", lock)
        if format_version is not None and format_version != _format_of(artifact):
            return stale(kind, f"model format {format_version}, this version reads another", lock)
        from phenoforge.setbuild.api import is_fit_model_directory

        if not is_fit_model_directory(name):  # bench scripts' models: only another build's are known stale
            return kept(kind, "not a fit's model (a benchmark script's), of this vocabulary build", lock)
        if state.fits_known:
            return stale(kind, "no current fitted bundle uses it", lock)
        return kept(kind, "of this vocabulary build, kept while a fit is missing", lock)
    if kind == "membership model lock":
        if current:
            return kept("lock")
        if match["model"] in names:  # sorted with its folder (a folder left alone keeps its lock)
            return Entry(name, "lock", 0, f"the lock of {match['model']}"), "current"
        return stale("lock", "the lock of a membership model that is gone", name)
    if kind in ("set-builder fit lock", "first-run fitting"):
        return kept("lock", "a fitter's lock (or its progress while it runs): left alone")
    if kind == "ONNX export":
        lock = f"{match['stem']}.lock"
        if current:
            return kept(kind, lock=lock)
        return stale(kind, "made for another model package or torch version", lock)
    if kind == "ONNX export lock":
        if current:
            return kept("lock")
        if f"{match['stem']}.onnx" in names:
            return Entry(name, "lock", 0, f"the lock of {match['stem']}.onnx"), "current"
        return stale("lock", "the lock of an ONNX export that is gone", name)
    # a kind described but not decided here: kept, and said
    return Entry(name, kind, entry_size(path), f"{kind}: clean does not decide this kind; left alone"), "unknown"


def _format_of(artifact: Artifact) -> int | str | None:
    return artifact.format() if artifact.format is not None else None


def _generation(found_build: str, found_format: int, build: str, module_format: int | str | None) -> str:
    if found_build != build:
        return f"made for vocabulary build {found_build} (current: {build})"
    return f"format {found_format}, this version reads format {module_format}"


def _params_current(path: Path, state: CurrentState) -> bool:
    """Whether a current fit was tuned with this parameters file (its own cohort list and a fit's model folder
    name it)."""
    if not state.params_fits:
        return False
    from phenoforge.setbuild.api import StoredFitFiles

    cohorts = _json_field(path, "training_cohorts")
    if not isinstance(cohorts, list) or not all(isinstance(c, str) for c in cohorts):
        return False
    for model_directory, with_dense in state.params_fits:
        fit = StoredFitFiles(None, "", True, model_directory)
        if fit.params_file(cohorts, with_dense) == path.name:
            return True
    return False


def _json_field(path: Path, key: str) -> object:
    """One top-level field of a small JSON file; None when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value.get(key) if isinstance(value, dict) else None


def _folder_names(path: Path) -> set[str] | None:
    try:
        return {child.name for child in path.iterdir()}
    except OSError:
        return None


# -- locks and removal -------------------------------------------------------------------------------------


def lock_is_held(lock_path: Path) -> bool:
    """Whether another process holds ``lock_path`` (``phenoforge.locks.file_lock``); never waits, never creates it.

    A lock file that cannot be opened counts as held: what it guards is left alone.
    """
    try:
        with _held(lock_path):
            return False
    except BlockingIOError:
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return True


@contextmanager
def _held(lock_path: Path) -> Iterator[None]:
    """Hold ``lock_path`` exclusively without waiting (``BlockingIOError`` when another process holds it)."""
    descriptor = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)


def remove_stale(plan: PrunePlan, dry_run: bool = False) -> PruneResult:
    """Remove ``plan.stale`` (nothing when ``dry_run``): each under its lock when it has one, taken without
    waiting (held by another process: left, as in use). A removal that fails is recorded, never raised."""
    result = PruneResult(plan, dry_run=dry_run)
    if dry_run:
        return result
    directory = plan.directory
    for entry in plan.stale:
        try:
            if entry.lock is not None and (directory / entry.lock).exists():
                try:
                    with _held(directory / entry.lock):
                        _remove_entry(directory, entry)
                except BlockingIOError:
                    entry.reason = _held_reason(entry)
                    plan.in_use.append(entry)
                    continue
            else:
                _remove_entry(directory, entry)
        except OSError as error:
            result.failed.append((entry, _why(error, directory)))
            continue
        result.removed.append(entry)
    return result


def _held_reason(entry: Entry) -> str:
    if entry.lock == entry.name:
        return "held by another process, which is writing what it locks"
    return f"its lock {entry.lock} is held: another process is writing it"


def _remove_entry(directory: Path, entry: Entry) -> None:
    for name in [entry.name, *entry.companions]:
        path = directory / name
        if path.parent != directory or "/" in name or name in ("", ".", ".."):
            raise OSError(errno.EINVAL, f"{name!r} is not an entry of {directory}")
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _why(error: OSError, directory: Path) -> str:
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{error.strerror or 'permission denied'}: make {directory} writable to remove it"
    return error.strerror or str(error)


def prune(
    con: duckdb.DuckDBPyConnection, dense: object | None, dry_run: bool = False, directory: Path | None = None
) -> PruneResult:
    """Find what the current state reads (``current_state``) and remove every stale file under data/models."""
    state = current_state(con, dense)
    return remove_stale(plan_prune(directory or models_directory(), state), dry_run)


# -- reporting ---------------------------------------------------------------------------------------------


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def describe(result: PruneResult, verbose: bool = True) -> list[str]:
    """The lines ``clean`` and ``build`` print: each removed (or, dry run, removable) entry, then a summary."""
    plan = result.plan
    lines: list[str] = []
    listed = plan.stale if result.dry_run else result.removed
    verb = "would remove" if result.dry_run else "removed"
    for entry in listed:
        lines.append(f"{verb} {entry.name} ({entry.kind}, {human_bytes(entry.size)}): {entry.reason}")
    for entry, why in result.failed:
        lines.append(f"could not remove {entry.name} ({entry.kind}, {human_bytes(entry.size)}): {why}")
    if verbose:
        for entry in plan.in_use:
            lines.append(f"kept {entry.name} ({entry.kind}): {entry.reason}")
        for entry in plan.unknown:
            lines.append(f"left alone {entry.name}: {entry.reason}")
        lines += [f"note: {note}" for note in plan.notes]
    size = sum(entry.size for entry in listed)
    summary = (
        f"{plan.directory}: {len(listed)} stale entr{'y' if len(listed) == 1 else 'ies'} "
        f"{'would free' if result.dry_run else 'freed'} {human_bytes(size)} ({size:,} bytes); "
        f"{len(plan.current)} current kept"
    )
    if plan.in_use:
        summary += f", {len(plan.in_use)} in use kept"
    if plan.unknown:
        summary += f", {len(plan.unknown)} not recognised left alone"
    if result.failed:
        summary += f"; {len(result.failed)} could not be removed"
    lines.append(summary)
    return lines

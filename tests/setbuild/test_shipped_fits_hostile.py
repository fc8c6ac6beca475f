"""Shipped set-builder fits against a hostile archive and an unlucky machine: nothing is written outside
data/models, nothing half-installed is read, and every failure ends in working builders or a clear refusal."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import lzma
import multiprocessing
import shutil
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from phenoforge.engine.curated import Library, load_library
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.prune import current_state, plan_prune
from phenoforge.setbuild import shipped_fits
from phenoforge.setbuild.api import FitRefused, FittedBuilders, fit_builders, fit_inputs, fits_refused
from phenoforge.setbuild.model_store import load_model, models_dir
from phenoforge.setbuild.shipped_fits import (
    PACKAGE_ROOT,
    ShippedFitsError,
    ShippedFitsManifest,
    code_digest,
    content_signature,
    install_shipped_models,
    read_archive,
    read_manifest,
)
from tests.fixture_vocab import build_fixture_vocab
from tests.setbuild import test_shipped_fits as base

HELD_OUT = base.HELD_OUT
packed_fixture_fit = base.packed_fixture_fit  # the fixture fit, packed once as scripts/ship_fits.py packs the real ones
shipped = base.shipped  # a copy of it for each test
fresh_machine = base.fresh_machine  # another machine's first run

Machine = tuple[duckdb.DuckDBPyConnection, list[Library]]
Edit = Callable[[dict[str, bytes], dict[str, Any]], None]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            archive.addfile(info, io.BytesIO(files[name]))
    return buffer.getvalue()


def _write(out: Path, files: dict[str, bytes], manifest: dict[str, Any], data: bytes | None = None) -> None:
    """The archive and a manifest whose checksums agree with it, as someone who can write both would ship them."""
    data = _tar(files) if data is None else data
    (out / shipped_fits.ARCHIVE_FILE).write_bytes(data)
    manifest["archive_sha256"] = _sha(data)
    manifest["files_sha256"] = {name: _sha(content) for name, content in sorted(files.items())}
    (out / shipped_fits.MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")


def _repack(out: Path, edit: Edit) -> None:
    manifest = json.loads((out / shipped_fits.MANIFEST_FILE).read_text(encoding="utf-8"))
    files = read_archive(ShippedFitsManifest.model_validate(manifest), out)
    edit(files, manifest)
    _write(out, files, manifest)


def _rename_directory(files: dict[str, bytes], manifest: dict[str, Any], old: str, new: str) -> None:
    """Name one model folder ``new`` everywhere: its members, the fitted file's states, the manifest."""
    for key in [key for key in files if key.startswith(f"{old}/")]:
        files[f"{new}/{key[len(old) + 1 :]}"] = files.pop(key)
    fit = manifest["fits"][0]
    fit["model_directories"] = [new if name == old else name for name in fit["model_directories"]]
    stored = json.loads(files[fit["fitted_file"]])
    for state in stored["states"].values():
        for key, value in state.items():
            if value == old:
                state[key] = new
    files[fit["fitted_file"]] = json.dumps(stored).encode()


def _everything(root: Path, but: Path) -> set[Path]:
    return {path for path in root.rglob("*") if but not in (path, *path.parents)}


def _first_directory(out: Path) -> str:
    manifest = read_manifest(out)
    assert manifest is not None
    return manifest.fits[0].model_directories[0]


def _refused(con: duckdb.DuckDBPyConnection, libraries: list[Library]) -> None:
    with pytest.raises(FitRefused), fits_refused("nothing may be installed from this archive"):
        fit_builders(con, None, HELD_OUT, libraries)


def _installs(con: duckdb.DuckDBPyConnection, libraries: list[Library]) -> FittedBuilders:
    with fits_refused("the shipped fit must be installed"):
        installed = fit_builders(con, None, HELD_OUT, libraries)
    assert any(note.startswith("installed the set builders") for note in installed.notes), installed.notes
    assert installed.model is not None and installed.context_model is not None
    return installed


def _target(con: duckdb.DuckDBPyConnection, name: str) -> Path:
    return models_dir() / shipped_fits.installed_name(name, get_hierarchy(con).build_id)


DEAD_PID = 999_999_999
"""a process id no process has (past any pid_max): what it left is a killed writer's"""


# -- names that point outside data/models ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["parent", "absolute", "nested"])
def test_a_model_folder_named_outside_data_models_is_never_written(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, tmp_path: Path, where: str
) -> None:
    _, out = shipped
    con, libraries = fresh_machine
    old = _first_directory(out)
    new = {"parent": f"../{old}", "absolute": str(tmp_path / "elsewhere" / old), "nested": f"sub/{old}"}[where]
    _repack(out, lambda files, manifest: _rename_directory(files, manifest, old, new))
    before = _everything(tmp_path, models_dir())
    _refused(con, libraries)
    assert _everything(tmp_path, models_dir()) == before
    assert not (models_dir() / "sub").exists()


@pytest.mark.parametrize(
    "member", ["../../escaped.txt", "{tmp}/escaped.txt", "sub/../../../escaped.txt", "escaped.txt", "Manifest.json"]
)
def test_a_member_named_outside_its_model_folder_is_never_written(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, tmp_path: Path, member: str
) -> None:
    _, out = shipped
    con, libraries = fresh_machine
    name = _first_directory(out)
    hostile = f"{name}/{member.format(tmp=tmp_path)}"

    def edit(files: dict[str, bytes], _manifest: dict[str, Any]) -> None:
        files[hostile] = b"written by a hostile archive"

    _repack(out, edit)
    manifest = read_manifest(out)
    assert manifest is not None and hostile in read_archive(manifest, out)  # the archive does carry it
    before = _everything(tmp_path, models_dir())
    _refused(con, libraries)
    assert _everything(tmp_path, models_dir()) == before
    assert not list(tmp_path.rglob("escaped.txt")) and not list(tmp_path.rglob("Manifest.json"))


# -- manifests and archives that do not hold what they say ----------------------------------------------


@pytest.mark.parametrize("missing", ["fitted file", "model folder"])
def test_a_fit_naming_what_the_archive_lacks_is_not_installed(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, missing: str
) -> None:
    _, out = shipped
    con, libraries = fresh_machine

    def edit(_files: dict[str, bytes], manifest: dict[str, Any]) -> None:
        fit = manifest["fits"][0]
        if missing == "fitted file":
            fit["fitted_file"] = "fitted-0000000000000000.json"
        else:
            fit["model_directories"].append("membership-000000000000-000000000000-k0000000000")

    _repack(out, edit)
    _refused(con, libraries)
    assert not list(models_dir().glob("membership-*"))


@pytest.mark.parametrize(
    "fitted",
    [
        {"states": [], "training_libraries": ["fixture-train"]},
        {"states": {"learned": "not a state"}, "training_libraries": ["fixture-train"]},
        {"states": {}},
        {"states": {}, "training_libraries": "fixture-train", "notes": 3},
        [],
    ],
    ids=["states a list", "a state not a mapping", "no training libraries", "wrong types", "not an object"],
)
def test_a_malformed_fitted_file_is_refused_not_a_crash(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, fitted: object
) -> None:
    _, out = shipped
    con, libraries = fresh_machine

    def edit(files: dict[str, bytes], manifest: dict[str, Any]) -> None:
        files[manifest["fits"][0]["fitted_file"]] = json.dumps(fitted).encode()

    _repack(out, edit)
    _refused(con, libraries)


def test_another_format_version_is_not_installed(shipped: tuple[FittedBuilders, Path], fresh_machine: Machine) -> None:
    _, out = shipped
    con, libraries = fresh_machine
    _repack(out, lambda _files, manifest: manifest.update(format_version=shipped_fits.FORMAT_VERSION + 1))
    manifest = read_manifest(out)
    assert manifest is not None and manifest.format_version == shipped_fits.FORMAT_VERSION + 1
    _refused(con, libraries)
    assert not list(models_dir().glob("membership-*"))


@pytest.mark.parametrize("archive", ["xz but not tar", "empty tar", "empty file"])
def test_an_archive_that_is_no_tar_of_the_fits_is_not_installed(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, archive: str
) -> None:
    _, out = shipped
    con, libraries = fresh_machine
    manifest = json.loads((out / shipped_fits.MANIFEST_FILE).read_text(encoding="utf-8"))
    files = read_archive(ShippedFitsManifest.model_validate(manifest), out)
    data = {"xz but not tar": lzma.compress(b"plain text, not a tar"), "empty tar": _tar({}), "empty file": b""}
    _write(out, files, manifest, data[archive])  # checksums agree: only the content is wrong
    loaded = read_manifest(out)
    assert loaded is not None
    with pytest.raises(ShippedFitsError):
        read_archive(loaded, out)
    _refused(con, libraries)


@pytest.mark.parametrize("archive", ["../elsewhere/fits.tar.xz", "{tmp}/elsewhere/fits.tar.xz"])
def test_an_archive_named_outside_the_shipped_folder_is_never_read(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, tmp_path: Path, archive: str
) -> None:
    """Only the file beside the manifest is read (a manifest naming ``/dev/zero`` would read forever)."""
    _, out = shipped
    con, libraries = fresh_machine
    elsewhere = out.parent / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(out / shipped_fits.ARCHIVE_FILE, elsewhere / "fits.tar.xz")  # the very archive, checksum and all
    manifest = json.loads((out / shipped_fits.MANIFEST_FILE).read_text(encoding="utf-8"))
    manifest["archive"] = archive.format(tmp=tmp_path)
    (out / shipped_fits.MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")
    loaded = read_manifest(out)
    assert loaded is not None
    with pytest.raises(ShippedFitsError, match="not a file beside it"):
        read_archive(loaded, out)
    _refused(con, libraries)


# -- an installer killed mid-way, a damaged install ---------------------------------------------------------


@pytest.mark.parametrize(
    "left", ["staging folder", "folder without manifest", "manifest without model", "first model only", "a link"]
)
def test_what_a_killed_installer_or_a_damage_left_is_never_read(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, left: str
) -> None:
    _, out = shipped
    con, libraries = fresh_machine
    manifest = read_manifest(out)
    assert manifest is not None
    files = read_archive(manifest, out)
    killed: list[Path] = []
    for name in manifest.fits[0].model_directories:
        target = _target(con, name)
        if left == "staging folder":
            folder = target.parent / f".{target.name}.{DEAD_PID}.0badf00d.tmp"
            folder.mkdir(parents=True)
            (folder / "model.onnx").write_bytes(files[f"{name}/model.onnx"][:10])
            killed.append(folder)
        elif left == "folder without manifest":
            target.mkdir(parents=True)
            (target / "model.onnx").write_bytes(files[f"{name}/model.onnx"][:10])
        elif left == "manifest without model":
            target.mkdir(parents=True)
            (target / "manifest.json").write_bytes(files[f"{name}/manifest.json"])
        elif left == "a link":  # to a folder outside data/models: never written through
            outside = target.parent.parent / f"outside-{name}"
            outside.mkdir(parents=True)
            (outside / "model.onnx").write_bytes(b"not this model")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(outside, target_is_directory=True)
            killed.append(outside / "manifest.json")
        elif name == manifest.fits[0].model_directories[0]:  # killed after its first model
            shipped_fits._install_model(files, name, target, get_hierarchy(con).build_id)
    installed = _installs(con, libraries)
    build = get_hierarchy(con).build_id
    for name in manifest.fits[0].model_directories:
        model = load_model(_target(con, name), build)  # whole, and for this build
        assert model.manifest.vocabulary_build_id == build
        assert not _target(con, name).is_symlink()
    if left == "a link":
        assert sorted(p.name for p in models_dir().parent.glob("outside-*/*")) == ["model.onnx", "model.onnx"]
    assert installed.states()["learned"]["model_directory"] == _target(con, _first_directory(out)).name
    # nothing set aside or staged stays, and what the killed installer left is gone
    assert [p.name for p in models_dir().iterdir() if p.name.startswith(".membership")] == []
    assert killed == [] or not any(folder.exists() for folder in killed)


def test_a_full_disk_installs_nothing_and_a_later_run_installs_whole(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, out = shipped
    con, libraries = fresh_machine
    real_open = open

    class FullDisk(io.RawIOBase):
        def __init__(self, path: Path) -> None:
            self.handle = real_open(path, "wb")

        def write(self, data: Any) -> int:
            self.handle.write(bytes(data)[:7])
            self.handle.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def fileno(self) -> int:
            return self.handle.fileno()

        def close(self) -> None:
            self.handle.close()
            super().close()

    with monkeypatch.context() as patch:
        patch.setattr(shipped_fits, "open", lambda path, mode: FullDisk(path), raising=False)
        _refused(con, libraries)
    # nothing half-written stays: no model folder, no staging folder, no fitted bundle
    assert not [p for p in models_dir().iterdir() if "membership" in p.name or p.name.startswith("fitted-")]
    _installs(con, libraries)


def test_a_data_folder_that_cannot_be_written_leaves_the_fit_to_be_made(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, out = shipped
    con, libraries = fresh_machine

    real_mkdir = Path.mkdir

    def read_only(path: Path, *args: Any, **kwargs: Any) -> None:
        if path.name.startswith(".membership"):  # the installer's folder: data/models refuses new entries
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        real_mkdir(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Path, "mkdir", read_only)
        _refused(con, libraries)
        assert not list(models_dir().glob("membership-*"))
        # without refusal the fit is made here (models in memory): working builders, not said to be installed
        fitted = fit_builders(con, None, HELD_OUT, libraries)
    assert fitted.model is not None and fitted.context_model is not None
    assert not any(note.startswith("installed the set builders") for note in fitted.notes)


def test_two_installers_at_once_both_end_with_the_whole_model(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine
) -> None:
    _, out = shipped
    con, libraries = fresh_machine
    barrier = threading.Barrier(4)
    results: list[FittedBuilders | BaseException] = []

    def run() -> None:
        cursor = con.cursor()
        barrier.wait()
        try:
            with fits_refused("the shipped fit must be installed"):
                results.append(fit_builders(cursor, None, HELD_OUT, libraries))
        except BaseException as error:  # reported below
            results.append(error)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(isinstance(result, FittedBuilders) for result in results), results
    build = get_hierarchy(con).build_id
    for name in (read_manifest(out) or pytest.fail("no manifest")).fits[0].model_directories:
        assert load_model(_target(con, name), build).manifest.vocabulary_build_id == build
    assert not [p for p in models_dir().iterdir() if p.name.startswith(".membership")]


def test_two_installers_of_one_model_at_once(shipped: tuple[FittedBuilders, Path], fresh_machine: Machine) -> None:
    """The model folder alone, raced: every installer returns, the folder is whole, no staging folder is left."""
    _, out = shipped
    con, _ = fresh_machine
    manifest = read_manifest(out)
    assert manifest is not None
    files = read_archive(manifest, out)
    name = _first_directory(out)
    build = get_hierarchy(con).build_id
    target = _target(con, name)
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            shipped_fits._install_model(files, name, target, build)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert load_model(target, build).manifest.vocabulary_build_id == build
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json", "model.onnx"]
    assert [p.name for p in models_dir().iterdir() if p.name.startswith(".")] == []


# -- a vocabulary rebuild -----------------------------------------------------------------------------------


def test_a_vocabulary_rebuild_installs_again_for_the_new_build(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, tmp_path: Path
) -> None:
    con, libraries = fresh_machine
    first = _installs(con, libraries)
    rebuilt = duckdb.connect(str(build_fixture_vocab(tmp_path / "rebuilt-vocab.duckdb")), read_only=True)
    try:
        new_build = get_hierarchy(rebuilt).build_id
        assert new_build != get_hierarchy(con).build_id
        again = _installs(rebuilt, libraries)
        assert again.model is not None and first.model is not None
        assert again.model.manifest.vocabulary_build_id == new_build
        assert again.states()["learned"]["model_directory"] != first.states()["learned"]["model_directory"]
    finally:
        rebuilt.close()


def test_a_new_build_whose_id_starts_like_the_old_one_gets_its_own_models(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine
) -> None:
    """Installed folders are named by the build id's first 8 characters: a later build that shares them must
    not find the earlier build's models 'installed before' (their manifests name the earlier build)."""
    _, out = shipped
    con, libraries = fresh_machine
    _installs(con, libraries)
    hierarchy = get_hierarchy(con)
    twin = dataclasses.replace(hierarchy, build_id=hierarchy.build_id[:8] + "f" * 24)
    assert twin.build_id != hierarchy.build_id
    inputs = fit_inputs(con, None, HELD_OUT, libraries)
    bundle = install_shipped_models(con, twin, inputs.train_libraries, libraries, None, inputs.held_key)
    assert bundle is not None
    directory = bundle.states["learned"]["model_directory"]
    assert load_model(models_dir() / directory, twin.build_id).manifest.vocabulary_build_id == twin.build_id


# -- a user's import beside the bundled libraries ------------------------------------------------------------


def test_a_user_import_beside_the_bundled_libraries_changes_nothing(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, tmp_path: Path
) -> None:
    con, libraries = fresh_machine
    copy = tmp_path / "imported"
    shutil.copytree(libraries[0].path, copy)
    path = copy / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["library_id"] = "my-own-list"
    manifest["report"] = {"build": {"imported_from": "/home/me/my-own-list.csv"}}
    path.write_text(json.dumps(manifest), encoding="utf-8")
    imported = load_library(copy)
    inputs = fit_inputs(con, None, HELD_OUT, libraries)
    with_import = fit_inputs(con, None, HELD_OUT, [*libraries, imported])
    assert [lib.library_id for lib in with_import.train_libraries] == ["fixture-train"]
    signature = content_signature(con, inputs.train_libraries, libraries, None, inputs.held_key)
    assert content_signature(con, with_import.train_libraries, libraries, None, with_import.held_key) == signature
    # were it taken for knowledge, the signature would differ: the install below holds only because it is not
    assert content_signature(con, inputs.train_libraries, [*libraries, imported], None, inputs.held_key) != signature
    installed = _installs(con, [*libraries, imported])
    assert installed.training_libraries == ["fixture-train"]


def test_prune_knows_installed_models_and_removes_those_of_another_build(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, tmp_path: Path
) -> None:
    """Installed model folders are a fit's model folders to ``prune``: an earlier build's are stale (not
    'not recognised', kept forever), this build's are not, and a killed installer's staging folder is stale."""
    con, libraries = fresh_machine
    first = _installs(con, libraries)
    old_folders = [first.states()["learned"][key] for key in ("model_directory", "context_model_directory")]
    rebuilt = duckdb.connect(str(build_fixture_vocab(tmp_path / "rebuilt-vocab.duckdb")), read_only=True)
    try:
        again = _installs(rebuilt, libraries)
        new_folders = [again.states()["learned"][key] for key in ("model_directory", "context_model_directory")]
        killed = f".{new_folders[0]}.{DEAD_PID}.0badf00d.tmp"
        (models_dir() / killed).mkdir()
        plan = plan_prune(models_dir(), current_state(rebuilt, None))
    finally:
        rebuilt.close()
    stale = {entry.name for entry in plan.stale}
    assert set(old_folders) <= stale, [(entry.name, entry.reason) for entry in plan.unknown]
    assert killed in stale
    assert not set(new_folders) & stale
    assert not [entry.name for entry in plan.unknown if "membership" in entry.name]


def _install_in_a_process(files: dict[str, bytes], name: str, target: Path, build: str, barrier: Any) -> None:
    barrier.wait()
    shipped_fits._install_model(files, name, target, build)


def test_two_processes_installing_one_model_at_once(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine
) -> None:
    _, out = shipped
    con, _ = fresh_machine
    manifest = read_manifest(out)
    assert manifest is not None
    files = read_archive(manifest, out)
    name, build = _first_directory(out), get_hierarchy(con).build_id
    target = _target(con, name)
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(3)
    processes = [
        context.Process(target=_install_in_a_process, args=(files, name, target, build, barrier)) for _ in range(3)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        if process.is_alive():  # hung: end it, and fail below
            process.terminate()
    assert [process.exitcode for process in processes] == [0, 0, 0]
    assert load_model(target, build).manifest.vocabulary_build_id == build
    assert [p.name for p in models_dir().iterdir() if p.name.startswith(".")] == []


def _package_copy(root: Path) -> Path:
    for path in PACKAGE_ROOT.rglob("*.py"):
        if "__pycache__" not in path.parts:
            copy = root / path.relative_to(PACKAGE_ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(path.read_bytes())
    return root


@pytest.mark.parametrize("stray", ["an editor's lock", "a copy", "a notebook checkpoint"])
def test_a_file_python_never_imports_leaves_the_code_digest_alone(tmp_path: Path, stray: str) -> None:
    """An editor's dangling ``.#api.py`` link made the digest raise (fit_builders crashed), and a stray copy
    made every shipped fit stale: neither is code a fit runs."""
    root = _package_copy(tmp_path / "phenoforge")
    before = code_digest(root)
    assert before == code_digest(PACKAGE_ROOT)
    if stray == "an editor's lock":
        (root / "setbuild" / ".#api.py").symlink_to("me@host.4242:1733500000")  # dangling, as emacs makes it
    elif stray == "a copy":
        (root / "setbuild" / "api copy.py").write_bytes((root / "setbuild" / "api.py").read_bytes() + b"# mine\n")
    else:
        (root / "setbuild" / ".ipynb_checkpoints").mkdir()
        (root / "setbuild" / ".ipynb_checkpoints" / "learned-checkpoint.py").write_text("x = 1\n", encoding="utf-8")
    code_digest.cache_clear()
    assert code_digest(root) == before
    (root / "setbuild" / "learned.py").write_bytes((root / "setbuild" / "learned.py").read_bytes() + b"# changed\n")
    code_digest.cache_clear()
    assert code_digest(root) != before  # a real change still moves it


def test_fitting_code_that_cannot_be_read_is_refused_not_a_crash(
    shipped: tuple[FittedBuilders, Path], fresh_machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    con, libraries = fresh_machine

    def unreadable() -> str:
        raise PermissionError(errno.EACCES, "Permission denied", str(PACKAGE_ROOT / "setbuild" / "api.py"))

    monkeypatch.setattr(shipped_fits, "code_digest", unreadable)
    _refused(con, libraries)

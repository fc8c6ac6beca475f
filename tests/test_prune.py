"""Pruning data/models: a fixture data directory with the current generation and stale ones of every kind.

The current generation is what a fit of the installed libraries writes into an *empty* models folder (the
ground truth of what the current state reads, found without the pruner); the stale ones are what an earlier
library edit left, plus files of another vocabulary build, format, torch version and killed processes.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

import phenoforge.setbuild.builders.learned as learned_builder
from phenoforge import prune
from phenoforge.artifacts import entry_size
from phenoforge.config import data_dir, libraries_dir
from phenoforge.engine.dense.model import onnx_model_file
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.locks import file_lock
from phenoforge.methods import set_building
from phenoforge.setbuild import api, knowledge_store
from phenoforge.setbuild.nodes import node_table_path
from phenoforge.setbuild.robust import word_counts_path
from tests.fixture_library import write_icd_library
from tests.setbuild.conftest import OTHER_COHORTS, TRAIN_COHORTS

SMALL = {"min_cohorts": 3, "min_positives": 5}
HCC_ID = "cms-hcc-v28-fixture"
ELIX_ID = "elixhauser-2026-fixture"
TEST_ID = "charlson-quan-fixture"
HCC_EDITED = {cid: spec for cid, spec in TRAIN_COHORTS.items() if cid != "femur"}
"""The HCC library after an edit: one cohort fewer (its stamp, and every fit that sees it, change)."""


@pytest.fixture(autouse=True)
def _no_process_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's fits read and write its own data/models (the per-process caches would answer otherwise)."""
    monkeypatch.setattr(knowledge_store, "_KNOWLEDGE", {})
    monkeypatch.setattr(api, "_EXAMPLES", {})
    set_building.clear_fitted()


def _install(hcc: dict) -> None:
    root = libraries_dir()
    write_icd_library(root / "hcc", hcc, library_id=HCC_ID, group="cms-hcc")
    write_icd_library(
        root / "elix", {**OTHER_COHORTS, "dm2": TRAIN_COHORTS["dm2"]}, library_id=ELIX_ID, group="elixhauser"
    )
    write_icd_library(root / "test", {"hf": TRAIN_COHORTS["hf"], "af": TRAIN_COHORTS["af"]}, TEST_ID, group="charlson")


def _fit(con: duckdb.DuckDBPyConnection) -> list[tuple[str, api.FittedBuilders]]:
    set_building.clear_fitted()
    api._EXAMPLES.clear()
    return set_building.fit_for_installed_libraries(con, None)


def _models() -> Path:
    return data_dir() / "models"


def _names(folder: Path) -> set[str]:
    return {child.name for child in folder.iterdir()} if folder.exists() else set()


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


@pytest.fixture
def generations(fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict:
    """data/models with the current generation, the one a library edit left, and stale files of every other kind.

    Returns what each name is expected to be: ``current``, ``stale`` or ``unknown``.
    """
    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **SMALL))
    models = _models()
    _install(TRAIN_COHORTS)
    first = _fit(fixture_con)
    assert all(fitted.model is not None for _scored, fitted in first)
    old = tmp_path / "old-generation"
    shutil.move(models, old)
    _install(HCC_EDITED)  # the edit: the current state is the edited library's
    _fit(fixture_con)
    build = get_hierarchy(fixture_con).build_id
    for per_build in (node_table_path(build).name, word_counts_path(build).name):
        # one per build, kept in memory by this process once written (by an earlier test, too): as a user's disk has it
        if (old / per_build).exists():
            shutil.move(old / per_build, models / per_build)
        elif not (models / per_build).exists():
            (models / per_build).write_bytes(b"t" * 100)
    current = _names(models)
    assert {node_table_path(build).name, word_counts_path(build).name} <= current
    assert len([n for n in current if n.startswith("fitted-")]) == 4  # three groups and free queries
    for child in old.iterdir():  # the earlier generation beside it, as it stays on a user's disk
        if not (models / child.name).exists():
            shutil.move(child, models / child.name)
    stale = {name for name in _names(models) if name not in current}
    assert any(n.startswith("membership-") for n in stale) and any(n.startswith("fitted-") for n in stale)
    # a builder-params file the edit did not change (the fit without the HCC group never saw it) stays current
    assert any(n.startswith("builder-params-") for n in current)

    def write(name: str, data: bytes = b"x" * 1000) -> str:
        (models / name).write_bytes(data)
        return name

    # another vocabulary build and another format
    other = "0" * 32
    stale |= {
        write(f"node-table-{other}-v1.npz", b"n" * 5000),
        write(f"node-table-{build}-v0.npz"),
        write(f"word-counts-{other}-v1.json"),
        write(f"curated-knowledge-{other}-{'a' * 16}-v1.npz"),
        write(f"curated-knowledge-{build}-{'b' * 16}-v1.npz"),  # this build, other library contents
    }
    a_model = next(n for n in current if n.startswith("membership-"))
    old_model = "membership-0123456789ab"  # a benchmark script's name, trained on another build
    shutil.copytree(models / a_model, models / old_model)
    manifest = json.loads((models / old_model / "manifest.json").read_text())
    manifest["vocabulary_build_id"] = other
    (models / old_model / "manifest.json").write_text(json.dumps(manifest))
    write(f".{old_model}.lock", b"")
    stale |= {old_model, f".{old_model}.lock", write(".membership-aaaaaaaaaaaa-bbbbbbbbbbbb-kcccccccccc.lock", b"")}
    params = next(n for n in current if n.startswith("builder-params-"))
    stored = json.loads((models / params).read_text())
    stale.add(write("builder-params-0123456789ab.json", json.dumps({**stored, "vocabulary_build_id": other}).encode()))
    # the ONNX export: the installed packages' one is current, an older torch's is stale
    onnx = onnx_model_file()
    current |= {write(onnx.name), write(f"{onnx.stem}-int8.onnx"), write(onnx.with_suffix(".lock").name, b"")}
    old_onnx = "all-MiniLM-L6-v2-0.1.0-torch2.1.0-opset17"
    stale |= {write(f"{old_onnx}.onnx", b"o" * 20000), write(f"{old_onnx}-int8.onnx"), write(f"{old_onnx}.lock", b"")}
    # temporaries of killed writers
    dead = _dead_pid()
    stale |= {write(f".fitted-0123456789abcdef.json.{dead}.0123abcd.tmp"), write(f".{onnx.name}.{dead}.tmp")}
    # what phenoforge does not make: a user's file, a folder, a link named like a stale node table
    outside = tmp_path / "outside.npz"
    outside.write_bytes(b"keep me")
    (models / f"node-table-{'1' * 32}-v1.npz").symlink_to(outside)
    (models / "exports").mkdir()
    (models / "exports" / "mine.csv").write_text("a,b\n")
    # a stale model folder someone put a file of their own into is not emptied
    with_mine = "membership-aaaaaaaaaaaa-bbbbbbbbbbbb-kdddddddddd"
    shutil.copytree(models / a_model, models / with_mine)
    (models / with_mine / "my-notes.txt").write_text("mine")
    unknown = {write("notes.txt"), "exports", f"node-table-{'1' * 32}-v1.npz", with_mine}
    return {"current": current, "stale": stale, "unknown": unknown, "outside": outside, "build": build}


def _prune(con: duckdb.DuckDBPyConnection, dry_run: bool = False) -> prune.PruneResult:
    return prune.prune(con, None, dry_run=dry_run)


def test_stale_files_of_every_kind_go_current_and_unknown_ones_stay(
    fixture_con: duckdb.DuckDBPyConnection, generations: dict
) -> None:
    sizes = {name: entry_size(_models() / name) for name in generations["stale"]}
    result = _prune(fixture_con)
    left = _names(_models())
    assert generations["current"] <= left, generations["current"] - left
    assert generations["unknown"] <= left
    assert not generations["stale"] & left, generations["stale"] & left
    assert left == generations["current"] | generations["unknown"]
    assert {entry.name for entry in result.removed} == generations["stale"] - {
        n for entry in result.removed for n in entry.companions
    }
    assert result.freed == sum(sizes.values()) and result.freed > 25000
    assert generations["outside"].read_bytes() == b"keep me"  # the link went nowhere, its target stays
    assert (_models() / "exports" / "mine.csv").exists()
    assert not result.failed
    assert {entry.name for entry in result.plan.unknown} == generations["unknown"]


def test_after_pruning_every_fit_is_reused_not_refitted(
    fixture_con: duckdb.DuckDBPyConnection, generations: dict
) -> None:
    """Nothing the current state reads went: the next fit of every group reuses its bundle as it is."""
    _prune(fixture_con)
    before = {name: (_models() / name).stat().st_mtime_ns for name in generations["current"]}
    for scored, fitted in _fit(fixture_con):
        assert any(note.startswith("reused the builders") for note in fitted.notes), (scored, fitted.notes)
        assert fitted.model is not None
    assert _names(_models()) == generations["current"] | generations["unknown"]
    assert {name: (_models() / name).stat().st_mtime_ns for name in generations["current"]} == before


def test_a_dry_run_lists_what_would_go_and_removes_nothing(
    fixture_con: duckdb.DuckDBPyConnection, generations: dict
) -> None:
    before = _names(_models())
    result = _prune(fixture_con, dry_run=True)
    assert _names(_models()) == before
    assert not result.removed
    listed = {entry.name for entry in result.plan.stale} | {n for e in result.plan.stale for n in e.companions}
    assert listed == generations["stale"]
    lines = prune.describe(result)
    assert sum(line.startswith("would remove ") for line in lines) == len(result.plan.stale)
    assert f"would free {prune.human_bytes(result.plan.stale_bytes)}" in lines[-1]
    assert f"({result.plan.stale_bytes:,} bytes)" in lines[-1]


def test_a_stale_model_whose_lock_another_writer_holds_is_kept(
    fixture_con: duckdb.DuckDBPyConnection, generations: dict
) -> None:
    old_model = "membership-0123456789ab"
    old_onnx = "all-MiniLM-L6-v2-0.1.0-torch2.1.0-opset17"
    # flock locks belong to the open file: this test's lock excludes the pruner as another process's would
    with file_lock(_models() / f".{old_model}.lock"), file_lock(_models() / f"{old_onnx}.lock"):
        listed = _prune(fixture_con, dry_run=True)
        result = _prune(fixture_con)
    assert {old_model, f"{old_onnx}.onnx"} <= {entry.name for entry in listed.plan.in_use}
    assert not {old_model, f"{old_onnx}.onnx"} & {entry.name for entry in listed.plan.stale}
    left = _names(_models())
    assert {old_model, f".{old_model}.lock", f"{old_onnx}.onnx", f"{old_onnx}.lock"} <= left
    in_use = {entry.name for entry in result.plan.in_use}
    assert {old_model, f"{old_onnx}.onnx"} <= in_use
    assert not (generations["stale"] - left - {n for e in result.removed for n in [e.name, *e.companions]})
    # released, the next prune takes them
    _prune(fixture_con)
    assert not {old_model, f"{old_onnx}.onnx"} & _names(_models())


def test_a_temporary_of_a_running_process_is_kept(fixture_con: duckdb.DuckDBPyConnection, generations: dict) -> None:
    mine = _models() / f".node-table-x-v1.npz.{os.getpid()}.89abcdef.tmp"
    mine.write_bytes(b"half")
    result = _prune(fixture_con)
    assert mine.exists() and mine.name in {entry.name for entry in result.plan.in_use}


def test_while_a_fit_is_missing_only_another_builds_fits_go(
    fixture_con: duckdb.DuckDBPyConnection, generations: dict
) -> None:
    """A fit whose bundle is missing (``build --no-fit``) may reuse any model or parameters of this build."""
    fitted = sorted(n for n in generations["current"] if n.startswith("fitted-"))
    (_models() / fitted[0]).unlink()
    result = _prune(fixture_con)
    left = _names(_models())
    same_build = {
        n for n in generations["stale"] if n.startswith(("fitted-", "builder-params-", "membership-")) and n in left
    }
    assert same_build  # the edit's models, bundles and parameters stay
    assert "membership-0123456789ab" not in left and "builder-params-0123456789ab.json" not in left
    assert f"node-table-{'0' * 32}-v1.npz" not in left  # the rest is decided as before
    assert any("not fitted" in note for note in result.plan.notes)


def test_a_linked_models_folder_is_not_pruned_through(tmp_path: Path, fixture_con: duckdb.DuckDBPyConnection) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    stale = elsewhere / f"node-table-{'0' * 32}-v1.npz"
    np.savez(stale, a=np.zeros(3))
    _models().parent.mkdir(parents=True, exist_ok=True)
    _models().symlink_to(elsewhere)
    with pytest.raises(prune.PruneError, match="symbolic link"):
        _prune(fixture_con)
    assert stale.exists()


def test_a_failed_removal_is_recorded_with_what_to_do(
    fixture_con: duckdb.DuckDBPyConnection, generations: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data/models the user cannot write: every removal fails with EACCES (root ignores chmod, so simulated)."""

    def refuse(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    monkeypatch.setattr(prune.shutil, "rmtree", lambda path, *a, **k: refuse(Path(path)))
    result = _prune(fixture_con)
    assert not result.removed and result.failed
    assert generations["stale"] <= _names(_models())
    assert all("make" in why and "writable" in why for _entry, why in result.failed)


def test_with_a_dense_index_its_fits_and_the_no_dense_ones_are_current_an_older_index_fits_are_not(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands load the ready index: fits made with it are current, so are ``--no-dense`` fits beside them;
    fits made with an earlier build of the index (another ``built_at``) are stale, the knowledge embedded
    by the same embedding stays."""
    import copy

    from phenoforge.engine.dense import ensure_dense_index
    from tests.setbuild.test_stored_knowledge import IdentifiedEmbedder

    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **SMALL))
    _install(TRAIN_COHORTS)
    dense = ensure_dense_index(fixture_con, embed_fn=IdentifiedEmbedder())
    models = _models()
    models.mkdir(parents=True, exist_ok=True)
    (models / onnx_model_file().name).write_bytes(b"the export the embedding's identity names")
    older = copy.copy(dense)  # the same index as an earlier build of it left it named
    older.status = dense.status.model_copy(update={"built_at": "2020-01-01T00:00:00+00:00"})
    set_building.clear_fitted()
    set_building.fit_for_installed_libraries(fixture_con, older)
    older_fits = {n for n in _names(models) if n.startswith("fitted-")}
    set_building.clear_fitted()
    set_building.fit_for_installed_libraries(fixture_con, None)
    set_building.clear_fitted()
    set_building.fit_for_installed_libraries(fixture_con, dense)
    everything = _names(models)
    fits = {n for n in everything if n.startswith("fitted-")}
    assert len(older_fits) == 4 and len(fits) == 12  # with the older index, without an index, with this one
    knowledge = {n for n in everything if n.startswith("curated-knowledge-")}
    assert len(knowledge) == 2  # embedded (one identity for both index builds) and not embedded
    result = prune.prune(fixture_con, dense)
    assert _names(models) == everything - older_fits
    assert {entry.name for entry in result.removed} == older_fits
    assert result.plan.notes == []
    # what was kept is what the next fit reads: with the index and without it, nothing is refitted
    for variant in (dense, None):
        set_building.clear_fitted()
        for scored, fitted in set_building.fit_for_installed_libraries(fixture_con, variant):
            assert any(note.startswith("reused the builders") for note in fitted.notes), (scored, fitted.notes)
    assert _names(models) == everything - older_fits


def test_the_fit_a_benchmark_of_an_import_copying_a_bundled_library_reads_is_current(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Such a benchmark fits without the copied library's group too: a fit ``build`` never makes, still current."""
    from phenoforge.engine.curated import load_library
    from phenoforge.eval.harness import run_benchmark
    from tests.methods.test_transfer_leakage import _mark_imported

    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **SMALL))
    _install(TRAIN_COHORTS)
    only_hcc = {cid: TRAIN_COHORTS[cid] for cid in ("pvd", "femur", "obesity")}  # lists of the HCC library alone
    # declared in the Charlson group: held out with it, and with the HCC group it copies (a fit of its own)
    copy = write_icd_library(libraries_dir() / "mine", only_hcc, library_id="my-conditions", group="charlson")
    _mark_imported(copy)
    _fit(fixture_con)
    set_building.clear_fitted()
    report = run_benchmark(fixture_con, copy, load_library(copy).cohort_ids, methods=["learned"])
    assert any("exactly their codes" in note for note in report.methods["learned"].notes)
    everything = _names(_models())
    assert len([n for n in everything if n.startswith("fitted-")]) == 5  # build's four and the copy's
    result = prune.prune(fixture_con, None)
    assert _names(_models()) == everything and not result.removed
    set_building.clear_fitted()
    again = run_benchmark(fixture_con, copy, load_library(copy).cohort_ids, methods=["learned"])
    assert any(note.startswith("reused the builders") for note in again.methods["learned"].notes)
    assert _names(_models()) == everything


def test_the_fit_a_benchmark_of_a_library_declaring_another_group_than_its_family_reads_is_current(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cms-hcc-v28-old`` declaring group "old": build fits without "old", its benchmark without "old" and
    "cms-hcc" (its id's family): that second fit is current too."""
    from phenoforge.engine.curated import load_library
    from phenoforge.eval.harness import run_benchmark

    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **SMALL))
    _install(TRAIN_COHORTS)
    old_hcc = write_icd_library(libraries_dir() / "hcc-old", HCC_EDITED, library_id="cms-hcc-v24-old", group="old")
    _fit(fixture_con)
    report = run_benchmark(fixture_con, old_hcc, load_library(old_hcc).cohort_ids, methods=["learned"])
    assert report.methods["learned"].trained_on == sorted([ELIX_ID, TEST_ID])  # neither HCC library
    everything = _names(_models())
    result = prune.prune(fixture_con, None)
    assert _names(_models()) == everything and not result.removed
    set_building.clear_fitted()
    again = run_benchmark(fixture_con, old_hcc, load_library(old_hcc).cohort_ids, methods=["learned"])
    assert any(note.startswith("reused the builders") for note in again.methods["learned"].notes)


def test_while_a_fit_has_no_model_only_another_builds_parameters_go(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle fitted with too little data names no model folder, so which parameters it read is not known."""
    from phenoforge.setbuild.learned import TrainingDataTooSmall

    def too_small(*_args: object, **_kwargs: object) -> None:
        raise TrainingDataTooSmall("too few cohorts")

    monkeypatch.setattr(learned_builder, "ensure_model", too_small)
    _install(TRAIN_COHORTS)
    _fit(fixture_con)
    models = _models()
    params = sorted(n for n in _names(models) if n.startswith("builder-params-"))
    assert params
    stored = json.loads((models / params[0]).read_text())
    (models / "builder-params-aaaaaaaaaaaa.json").write_text(json.dumps(stored))  # this build, no fit names it
    other = {**stored, "vocabulary_build_id": "0" * 32}
    (models / "builder-params-bbbbbbbbbbbb.json").write_text(json.dumps(other))
    result = prune.prune(fixture_con, None)
    left = _names(models)
    assert "builder-params-aaaaaaaaaaaa.json" in left and set(params) <= left
    assert "builder-params-bbbbbbbbbbbb.json" not in left
    assert [entry.name for entry in result.removed] == ["builder-params-bbbbbbbbbbbb.json"]
    assert any("names no membership model" in note for note in result.plan.notes)


def test_while_the_onnx_export_is_missing_the_fits_made_with_the_ready_index_stay(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torch upgrade renames the export, which is made again only on the next embedding: the ready index and
    the fits made with it are unchanged (their signature names the index's build, not the export), so a
    ``clean`` in between must not take them for stale because ``--no-dense`` fits sit beside them."""
    from phenoforge.engine.dense import ensure_dense_index
    from tests.setbuild.test_stored_knowledge import IdentifiedEmbedder

    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **SMALL))
    _install(TRAIN_COHORTS)
    dense = ensure_dense_index(fixture_con, embed_fn=IdentifiedEmbedder())
    models = _models()
    models.mkdir(parents=True, exist_ok=True)
    for variant in (None, dense):
        set_building.clear_fitted()
        set_building.fit_for_installed_libraries(fixture_con, variant)
    everything = _names(models)
    assert len([n for n in everything if n.startswith("fitted-")]) == 8  # with the index and without it
    assert not (models / onnx_model_file().name).exists()  # as after an upgrade of torch
    result = prune.prune(fixture_con, dense)
    assert not result.removed
    assert _names(models) == everything
    set_building.clear_fitted()
    for scored, fitted in set_building.fit_for_installed_libraries(fixture_con, dense):
        assert any(note.startswith("reused the builders") for note in fitted.notes), (scored, fitted.notes)

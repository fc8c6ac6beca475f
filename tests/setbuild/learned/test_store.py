"""The membership model's store and reasons attacked: concurrent writers, killed writers, fallback wording."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild import learned, model_store
from phenoforge.setbuild.candidates import Retrieval, build_candidates
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.learned import MembershipModel, ModelError, build_learned
from phenoforge.setbuild.model_store import ensure_model
from tests.setbuild.conftest import SMALL, edit_manifest, resign_model


def test_a_code_kept_below_the_threshold_is_not_said_to_have_reached_it(
    model: MembershipModel, hierarchy: Hierarchy
) -> None:
    """The drilldown's 'why' for the most probable code kept as a fallback must not read 'p 0.02 >= 0.05'."""
    unreachable = model.manifest.model_copy(update={"rule": "threshold", "threshold": 1.01})
    strict = MembershipModel(unreachable, model.trees)
    table = build_candidates(hierarchy, Retrieval(query="Heart failure", bm25=[("I50", 5.0), ("I50.9", 4.0)]))
    built = build_learned(hierarchy, table, strict, scored_library_id="fixture-other", scored_group="fixture-other")
    assert built.fallback and built.codes
    for item in built.codes:
        assert item.provenance.source == "fallback"
        assert ">=" not in item.provenance.rule and "below" in item.provenance.rule, item.provenance.rule


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_what_a_killed_model_writer_left_is_removed_by_the_next_one(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    """SIGKILL skips ``finally``: a half-written model folder (and a moved-aside old one) stayed forever."""
    directory = tmp_path / "models" / "membership-x"
    directory.parent.mkdir(parents=True)
    pid = _dead_pid()
    half_written = directory.parent / f".membership-x.{pid}.0123abcd.tmp"
    half_written.mkdir()
    (half_written / learned.MODEL_FILE).write_bytes(b"half a model")
    moved_aside = directory.parent / f".membership-x.{pid}.4567cdef.old"
    moved_aside.mkdir()
    live = directory.parent / f".membership-y.{os.getpid()}.89abcdef.tmp"  # a writer still running: kept
    live.mkdir()
    ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)
    assert not half_written.exists() and not moved_aside.exists()
    assert live.exists()
    assert sorted(p.name for p in directory.parent.iterdir() if not p.name.endswith(".lock")) == [
        live.name,
        "membership-x",
    ]


def test_two_writers_of_one_model_both_succeed_and_the_second_reuses_it(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two benchmarks (or a dashboard and a benchmark) storing the same model: the second rename found the
    first one's folder in place and raised (a directory cannot replace a non-empty one)."""
    directory = tmp_path / "models" / "membership-x"
    barrier = threading.Barrier(2, timeout=3)
    replace = os.replace

    def replace_together(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == directory and Path(src).name.endswith(".tmp"):
            # both writers found no folder and are about to rename theirs into place; a broken barrier means
            # the other writer is not here (it waits for this one, or already reused the model)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
        replace(src, dst)

    monkeypatch.setattr(model_store.os, "replace", replace_together)
    errors: list[BaseException] = []
    notes: list[list[str]] = []

    def store() -> None:
        try:
            cursor = fixture_con.cursor()
            said = ensure_model(cursor, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)[1]
            notes.append(said)
        except BaseException as error:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(error)

    threads = [threading.Thread(target=store) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sorted(note[0].split()[0] for note in notes) == ["reused", "trained"], notes


def test_a_manifest_whose_features_do_not_fit_the_stored_estimator_is_refused(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    """The checksum covers the model file, not the manifest: a manifest edited to list fewer features loaded,
    then every prediction raised ValueError (X has 19 features, expecting 20) out of the whole benchmark."""
    directory = tmp_path / "models" / "membership-x"
    ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    edit_manifest(directory, features=manifest["features"][:-1])
    with pytest.raises(ModelError, match="features"):
        model_store.load_model(directory, hierarchy.build_id)
    model, notes = ensure_model(
        fixture_con,
        hierarchy,
        train_examples,
        with_dense=False,
        features=manifest["features"],
        directory=directory,
        **SMALL,
    )
    assert any("unusable, retrained" in note for note in notes), notes
    assert model.probabilities(train_examples[0].features).shape == (len(train_examples[0].table),)


class _RunsACommand:
    """What a tampered model file could hold if it were unpickled: unpickling it calls ``os.system``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_a_model_file_replaced_with_a_pickle_that_runs_code_is_refused_before_it_runs(
    model: MembershipModel, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    """The checksum only says the manifest and the file agree: whoever can write data/models (a shared
    or copied data folder) can re-sign any file, and loading a pickled model ran their code."""
    directory = model_store.save_model(model, tmp_path / "models" / "membership-x")
    marker = tmp_path / "ran"
    resign_model(directory, pickle.dumps(_RunsACommand(marker)))
    with pytest.raises(ModelError, match="not a readable tree ensemble"):
        model_store.load_model(directory, hierarchy.build_id)
    assert not marker.exists()
    assert model_store.load_model(model_store.save_model(model, tmp_path / "models" / "again"), hierarchy.build_id)


def test_a_model_file_replaced_with_trees_of_another_width_is_refused(
    model: MembershipModel, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    """Valid trees reading one feature fewer than the manifest lists would fail on every prediction."""
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingClassifier

    from phenoforge.setbuild.trees import ensemble_bytes

    width = len(model.manifest.features) - 1
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(60, width))
    narrow = HistGradientBoostingClassifier(max_iter=3).fit(rows, rows[:, 0] > 0)
    directory = model_store.save_model(model, tmp_path / "models" / "membership-x")
    resign_model(directory, ensemble_bytes(narrow))
    with pytest.raises(ModelError, match=f"read {width} features"):
        model_store.load_model(directory, hierarchy.build_id)


def test_a_model_trained_on_the_same_cohorts_but_other_candidate_rows_is_retrained(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    """Reuse was decided on cohort keys alone: after a retrieval or candidate change the bench's
    evaluation silently reused a model fitted on the old rows, and its figures measured nothing new."""
    directory = tmp_path / "models" / "membership-x"
    first, notes = ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)
    assert first.manifest.training_digest == learned.training_digest(train_examples, first.manifest.features)
    again, notes = ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)
    assert notes[0].startswith("reused"), notes
    changed = [
        dataclasses.replace(ex, features=ex.features + (1.0 if i == 0 else 0.0)) for i, ex in enumerate(train_examples)
    ]
    assert [ex.key for ex in changed] == [ex.key for ex in train_examples]
    retrained, notes = ensure_model(fixture_con, hierarchy, changed, with_dense=False, directory=directory, **SMALL)
    assert any("same cohorts but other rows" in note for note in notes), notes
    assert retrained.manifest.training_digest == learned.training_digest(changed, retrained.manifest.features)
    assert retrained.manifest.training_digest != first.manifest.training_digest
    relabelled = [dataclasses.replace(ex, labels=1 - ex.labels) if i == 1 else ex for i, ex in enumerate(changed)]
    assert learned.training_digest(relabelled, first.manifest.features) != retrained.manifest.training_digest

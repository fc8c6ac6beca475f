"""The stored membership model's training digest attacked: reuse must follow the rows a model was fitted
on (not their order, not empty cohorts, not the array layout), and anything else must retrain it."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild import learned, model_store
from phenoforge.setbuild.candidates import Retrieval
from phenoforge.setbuild.corpus import Example, make_example
from phenoforge.setbuild.features import FEATURE_NAMES
from phenoforge.setbuild.learned import LeakageError, train_membership_model, training_digest
from phenoforge.setbuild.model_store import ensure_model, load_model
from tests.setbuild.conftest import DROP, SMALL, edit_manifest

SAME_COHORTS_NOTE = "same cohorts but other rows"
BLAME_NOTE = SAME_COHORTS_NOTE
PREDATES_NOTE = "predates the training digest"


def _ensure(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    examples: list[Example],
    directory: Path,
    **kwargs: object,
) -> tuple[learned.MembershipModel, list[str]]:
    return ensure_model(con, hierarchy, examples, with_dense=False, directory=directory, **SMALL, **kwargs)


def _stored_manifest(directory: Path) -> dict[str, object]:
    return json.loads((directory / learned.MANIFEST_FILE).read_text(encoding="utf-8"))


def _nudged(examples: list[Example], column: int = 0, which: int = 0) -> list[Example]:
    """The same cohorts with one feature column of one cohort moved: other rows, same keys."""
    out = []
    for i, ex in enumerate(examples):
        if i == which:
            features = ex.features.copy()
            features[:, column] += 1.0
            ex = dataclasses.replace(ex, features=features)
        out.append(ex)
    return out


def test_examples_in_another_order_reuse_the_stored_model(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    first, _ = _ensure(fixture_con, hierarchy, train_examples, directory)
    shuffled = [train_examples[i] for i in np.random.default_rng(7).permutation(len(train_examples))]
    assert [ex.key for ex in shuffled] != [ex.key for ex in train_examples]
    assert training_digest(shuffled, first.manifest.features) == first.manifest.training_digest
    for order in (shuffled, list(reversed(train_examples))):
        again, notes = _ensure(fixture_con, hierarchy, order, directory)
        assert notes and notes[0].startswith("reused"), notes
        assert len(notes) == 1, notes
        assert again.manifest.trained_at == first.manifest.trained_at


def test_a_cohort_with_no_candidates_neither_changes_the_digest_nor_forces_a_retrain(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    empty = make_example(
        hierarchy,
        "fixture-train",
        "fixture-train",
        "nothing-found",
        "Nothing the retrievers find",
        ["I73.9"],
        Retrieval(query="qqqzzzxxx", bm25=[]),
    )
    assert len(empty.table) == 0
    directory = tmp_path / "models" / "m"
    first, _ = _ensure(fixture_con, hierarchy, train_examples, directory)
    with_empty = [empty, *train_examples, empty]
    assert training_digest(with_empty, first.manifest.features) == first.manifest.training_digest
    again, notes = _ensure(fixture_con, hierarchy, with_empty, directory)
    assert notes == ["reused model m (trained on fixture-train)"], notes
    assert empty.key not in again.manifest.training_cohorts
    # and the other way round: a model first trained with the empty cohort is reused without it
    other = tmp_path / "models" / "n"
    _ensure(fixture_con, hierarchy, with_empty, other)
    assert _ensure(fixture_con, hierarchy, train_examples, other)[1][0].startswith("reused")


def test_a_manifest_written_before_the_digest_existed_loads_and_is_retrained(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    _ensure(fixture_con, hierarchy, train_examples, directory)
    edit_manifest(directory, training_digest=DROP)
    old = load_model(directory, hierarchy.build_id)
    assert old.manifest.training_digest == ""
    model, notes = _ensure(fixture_con, hierarchy, train_examples, directory)
    assert not notes[0].startswith("reused"), notes
    assert any("retrained" in note for note in notes), notes
    assert any(note.startswith("trained model m") for note in notes), notes
    # the note says the model predates the digest, not that retrieval or candidates changed
    assert not any(BLAME_NOTE in note for note in notes), notes
    assert any(PREDATES_NOTE in note for note in notes), notes
    assert model.manifest.training_digest == training_digest(train_examples, model.manifest.features)
    assert _stored_manifest(directory)["training_digest"] == model.manifest.training_digest
    assert _ensure(fixture_con, hierarchy, train_examples, directory)[1][0].startswith("reused")


def test_a_hand_edited_digest_is_not_trusted(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    first, _ = _ensure(fixture_con, hierarchy, train_examples, directory)
    manifest = _stored_manifest(directory)
    digest = str(manifest["training_digest"])
    for forged in (digest.upper(), digest[:-1] + ("0" if digest[-1] != "0" else "1"), " " + digest, "x"):
        manifest["training_digest"] = forged
        (directory / learned.MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")
        model, notes = _ensure(fixture_con, hierarchy, train_examples, directory)
        assert any(SAME_COHORTS_NOTE in note for note in notes), (forged, notes)
        assert model.manifest.training_digest == first.manifest.training_digest
        assert _stored_manifest(directory)["training_digest"] == digest


def test_array_layout_and_dtype_do_not_change_the_digest_or_prevent_reuse(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    # values a float32 holds exactly, so the float32 copies carry the very same numbers
    exact = [
        dataclasses.replace(ex, features=ex.features.astype(np.float32).astype(np.float64)) for ex in train_examples
    ]
    features = learned.default_features(exact)
    reference = training_digest(exact, features)

    def strided(ex: Example) -> Example:
        wide = np.zeros((ex.features.shape[0] * 2, ex.features.shape[1] * 3), dtype=np.float64)
        wide[::2, ::3] = ex.features
        view = wide[::2, ::3]
        assert not view.flags["C_CONTIGUOUS"]
        return dataclasses.replace(ex, features=view)

    variants = {
        "float32": [dataclasses.replace(ex, features=ex.features.astype(np.float32)) for ex in exact],
        "fortran": [dataclasses.replace(ex, features=np.asfortranarray(ex.features)) for ex in exact],
        "strided": [strided(ex) for ex in exact],
        "bool labels": [dataclasses.replace(ex, labels=ex.labels.astype(bool)) for ex in exact],
        "int64 labels": [dataclasses.replace(ex, labels=ex.labels.astype(np.int64)) for ex in exact],
        "tuple features": exact,
    }
    for name, variant in variants.items():
        assert training_digest(variant, tuple(features) if name == "tuple features" else features) == reference, name
    directory = tmp_path / "models" / "m"
    _ensure(fixture_con, hierarchy, exact, directory)
    for name, variant in variants.items():
        notes = _ensure(fixture_con, hierarchy, variant, directory)[1]
        assert notes[0].startswith("reused"), (name, notes)


def test_nan_features_give_a_deterministic_digest_and_the_model_is_reused(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    def with_nan(examples: list[Example], row: int) -> list[Example]:
        out = []
        for ex in examples:
            features = ex.features.copy()
            features[row % len(features), 3] = np.nan
            out.append(dataclasses.replace(ex, features=features))
        return out

    nan_examples = with_nan(train_examples, 0)
    features = learned.default_features(nan_examples)
    digest = training_digest(nan_examples, features)
    assert training_digest(with_nan(train_examples, 0), features) == digest
    assert training_digest([dataclasses.replace(ex) for ex in nan_examples], features) == digest
    assert training_digest(with_nan(train_examples, 1), features) != digest
    assert digest != training_digest(train_examples, features)
    directory = tmp_path / "models" / "m"
    first, _ = _ensure(fixture_con, hierarchy, nan_examples, directory)
    assert first.manifest.training_digest == digest
    again, notes = _ensure(fixture_con, hierarchy, with_nan(train_examples, 0), directory)
    assert notes[0].startswith("reused"), notes
    moved, notes = _ensure(fixture_con, hierarchy, with_nan(train_examples, 1), directory)
    assert any(SAME_COHORTS_NOTE in note for note in notes), notes


def test_a_model_fitted_on_some_features_is_retrained_when_all_are_asked_for(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    subset = FEATURE_NAMES[:10]
    part, _ = _ensure(fixture_con, hierarchy, train_examples, directory, features=subset)
    assert part.manifest.features == subset
    assert part.manifest.training_digest == training_digest(train_examples, subset)
    assert part.manifest.training_digest != training_digest(train_examples, FEATURE_NAMES)
    # a column the subset model never reads changed: it learned nothing from it, so it is reused
    unused = _nudged(train_examples, column=20)
    assert _ensure(fixture_con, hierarchy, unused, directory, features=tuple(subset))[1][0].startswith("reused")
    # a column it does read changed: retrained
    used = _nudged(train_examples, column=2)
    notes = _ensure(fixture_con, hierarchy, used, directory, features=subset)[1]
    assert any(SAME_COHORTS_NOTE in note for note in notes), notes
    full, notes = _ensure(fixture_con, hierarchy, used, directory)
    assert not notes[0].startswith("reused"), notes
    assert full.manifest.features == FEATURE_NAMES
    assert full.manifest.training_digest == training_digest(used, FEATURE_NAMES)
    assert full.probabilities(used[0].features).shape == (len(used[0].table),)
    back, notes = _ensure(fixture_con, hierarchy, used, directory, features=subset)
    assert not notes[0].startswith("reused"), notes
    assert back.manifest.features == subset


def test_a_given_rule_is_reused_on_the_same_rows_and_retrained_on_other_ones(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    rule = ("threshold", 0.3)
    first, _ = _ensure(fixture_con, hierarchy, train_examples, directory, rule=rule)
    assert (first.manifest.rule, first.manifest.threshold) == rule
    assert first.manifest.threshold_chosen_on == "given by the caller"
    assert first.manifest.training_digest == training_digest(train_examples, first.manifest.features)
    notes = _ensure(fixture_con, hierarchy, list(reversed(train_examples)), directory, rule=rule)[1]
    assert notes[0].startswith("reused"), notes
    changed = _nudged(train_examples, column=1, which=3)
    model, notes = _ensure(fixture_con, hierarchy, changed, directory, rule=rule)
    assert any(SAME_COHORTS_NOTE in note for note in notes), notes
    assert (model.manifest.rule, model.manifest.threshold) == rule
    assert model.manifest.training_digest == training_digest(changed, model.manifest.features)
    # the default directory name includes the rule: a rule-less call does not pick the ruled model
    assert model_store.model_name(["fixture-train"], FEATURE_NAMES, False, rule) != model_store.model_name(
        ["fixture-train"], FEATURE_NAMES, False
    )


def test_concurrent_callers_with_other_rows_each_get_a_model_of_their_own_rows(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    variants = [train_examples, _nudged(train_examples, column=0), train_examples, _nudged(train_examples, column=0)]
    digests = [training_digest(v, FEATURE_NAMES) for v in variants]
    assert digests[0] != digests[1]
    start = threading.Barrier(len(variants), timeout=30)
    results: dict[int, tuple[str, list[str]]] = {}
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            cursor = fixture_con.cursor()
            start.wait()
            model, notes = _ensure(cursor, hierarchy, variants[i], directory)
            results[i] = (model.manifest.training_digest, notes)
        except BaseException as error:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(error)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(variants))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sorted(results) == list(range(len(variants)))
    for i, (digest, notes) in results.items():
        assert digest == digests[i], (i, notes)
    stored = load_model(directory, hierarchy.build_id)
    assert stored.manifest.training_digest in digests
    assert sorted(p.name for p in directory.parent.iterdir() if not p.name.endswith(".lock")) == ["m"]


def _colliding_pair(train_examples: list[Example]) -> tuple[list[Example], list[Example]]:
    """Two cohorts with the same keys but other rows whose digests agree: the digest concatenates each
    cohort's key, feature bytes and label bytes with no lengths, so rows can move from one cohort to the
    next when the second key's bytes sit in the first cohort's feature bytes."""
    by_size: dict[int, Example] = {}
    for ex in train_examples:
        by_size.setdefault(len(ex.table), ex)
    a1, b1, a2, b2 = by_size[8], by_size[9], by_size[3], by_size[2]
    k = len(FEATURE_NAMES)
    key2 = b"fixture-train/zz-b"
    n1, n2 = len(a1.table), len(a2.table)
    # A's second cohort's feature bytes hold B's first cohort's last labels and then B's second key
    f2 = bytearray(np.ascontiguousarray(a2.features, dtype=np.float64).tobytes())
    at = 8 * k - n1 - len(key2)
    f2[at : at + n1 + 1] = np.ascontiguousarray(b1.labels, dtype=np.int8).tobytes()
    f2[at + n1 + 1 : at + n1 + 1 + len(key2)] = key2
    ex_a1 = dataclasses.replace(a1, cohort_id="zz-a")
    ex_a2 = dataclasses.replace(
        a2, cohort_id="zz-b", features=np.frombuffer(bytes(f2), dtype=np.float64).reshape(n2, k)
    )
    stream = (
        np.ascontiguousarray(ex_a1.features, dtype=np.float64).tobytes()
        + np.ascontiguousarray(ex_a1.labels, dtype=np.int8).tobytes()
        + key2
        + bytes(f2)
        + np.ascontiguousarray(ex_a2.labels, dtype=np.int8).tobytes()
    )
    m1, m2 = n1 + 1, n2 - 1
    assert len(b1.table) == m1 and len(b2.table) == m2
    g1 = np.frombuffer(stream[: 8 * k * m1], dtype=np.float64).reshape(m1, k)
    labels1 = np.frombuffer(stream[8 * k * m1 : (8 * k + 1) * m1], dtype=np.int8)
    rest = stream[(8 * k + 1) * m1 :]
    assert rest.startswith(key2)
    rest = rest[len(key2) :]
    g2 = np.frombuffer(rest[: 8 * k * m2], dtype=np.float64).reshape(m2, k)
    labels2 = np.frombuffer(rest[8 * k * m2 :], dtype=np.int8)
    assert len(labels2) == m2 and set(labels1.tolist()) <= {0, 1} and set(labels2.tolist()) <= {0, 1}
    ex_b1 = dataclasses.replace(b1, cohort_id="zz-a", features=g1.copy(), labels=labels1.copy())
    ex_b2 = dataclasses.replace(b2, cohort_id="zz-b", features=g2.copy(), labels=labels2.copy())
    return [*train_examples, ex_a1, ex_a2], [*train_examples, ex_b1, ex_b2]


def test_rows_moved_between_cohorts_do_not_keep_the_digest(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    first, second = _colliding_pair(train_examples)
    assert [ex.key for ex in first] == [ex.key for ex in second]
    assert [len(ex.table) for ex in first] != [len(ex.table) for ex in second]
    directory = tmp_path / "models" / "m"
    model, _ = _ensure(fixture_con, hierarchy, first, directory)
    assert model.manifest.n_rows == sum(len(ex.table) for ex in first)
    _, notes = _ensure(fixture_con, hierarchy, second, directory)
    assert not notes[0].startswith("reused"), notes
    assert training_digest(first, FEATURE_NAMES) != training_digest(second, FEATURE_NAMES)


def _curator_edit(train_examples: list[Example], hierarchy: Hierarchy) -> list[Example]:
    """The heart-failure cohort's curated list gains twelve codes no retriever finds for it: its candidate
    rows, features and labels are unchanged (so is the digest), its ground truth is not."""
    out = []
    for ex in train_examples:
        if ex.cohort_id == "hf":
            found = {hierarchy.code[i] for i in ex.table.ids}
            extra = [
                c
                for c in sorted(hierarchy.code.values())
                if c[0].isalpha() and "-" not in c and c not in found and c not in ex.truth
            ]
            ex = dataclasses.replace(ex, truth=[*ex.truth, *extra[:12]])
        out.append(ex)
    return out


def test_a_reused_model_is_the_model_these_examples_would_train(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    edited = _curator_edit(train_examples, hierarchy)
    assert [ex.truth for ex in edited] != [ex.truth for ex in train_examples]
    fresh = train_membership_model(fixture_con, hierarchy, edited, with_dense=False, **SMALL)
    directory = tmp_path / "models" / "m"
    _ensure(fixture_con, hierarchy, train_examples, directory)
    model, notes = _ensure(fixture_con, hierarchy, edited, directory)
    assert (model.manifest.rule, model.manifest.threshold) == (fresh.manifest.rule, fresh.manifest.threshold), notes


def test_a_reused_model_refuses_to_score_the_training_datas_current_group(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    """The training library's manifest now declares group 'registry-x' (a sibling library is of that group)."""
    directory = tmp_path / "models" / "m"
    _ensure(fixture_con, hierarchy, train_examples, directory)
    regrouped = [dataclasses.replace(ex, group="registry-x") for ex in train_examples]
    fresh = train_membership_model(fixture_con, hierarchy, regrouped, with_dense=False, **SMALL)
    with pytest.raises(LeakageError):
        fresh.check_may_score("registry-x-sibling", "registry-x")
    model, notes = _ensure(fixture_con, hierarchy, regrouped, directory)
    with pytest.raises(LeakageError):
        model.check_may_score("registry-x-sibling", "registry-x")

"""The curated knowledge kept in ``data/models`` instead of re-read and re-embedded per process: read back,
it gives the same cohorts, vectors and matches as computed ones; a corrupt, stale or unwritable file is
recomputed (with a logged message), never used."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.curated import Library, load_library
from phenoforge.engine.dense.model import embed_identity
from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild import knowledge_store
from phenoforge.setbuild.api import library_stamp
from phenoforge.setbuild.transfer import (
    CuratedKnowledge,
    KnowledgeFileError,
    curated_knowledge,
    knowledge_path,
    load_knowledge,
)
from tests.engine.fake_embedder import FakeEmbedder
from tests.fixture_library import write_icd_library
from tests.setbuild.conftest import OTHER_COHORTS
from tests.setbuild.npz_files import read_npz, rewrite_npz, write_npz

IDENTITY = "fake-embedder-1"
QUERIES = ["Heart failure", "Type 2 diabetes mellitus", "Congestive heart failure", "asthma without status"]


class IdentifiedEmbedder(FakeEmbedder):
    """The fake model declaring what its vectors depend on, as ``default_embed_fn``'s do."""

    identity = IDENTITY


@pytest.fixture(autouse=True)
def _no_process_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call reads or builds the stored file (the per-process cache would answer otherwise)."""
    monkeypatch.setattr(knowledge_store, "_KNOWLEDGE", {})


def _libraries(libraries_root: Path) -> list[Library]:
    return [load_library(libraries_root / "train"), load_library(libraries_root / "other")]


def _stamps(libraries: list[Library]) -> list[tuple[str, str]]:
    return sorted((lib.library_id, library_stamp(lib)) for lib in libraries)


def _knowledge(
    con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, libraries: list[Library], embed: FakeEmbedder | None
) -> CuratedKnowledge:
    knowledge_store._KNOWLEDGE.clear()
    return curated_knowledge(con, hierarchy, libraries, library_stamp, embed, embed_identity(embed))


def _same(one: CuratedKnowledge, other: CuratedKnowledge) -> None:
    assert len(one.cohorts) == len(other.cohorts) > 0
    for a, b in zip(one.cohorts, other.cohorts, strict=True):
        assert (a.library_id, a.groups, a.cohort_id, a.cohort_name) == (
            b.library_id,
            b.groups,
            b.cohort_id,
            b.cohort_name,
        )
        assert a.ids.dtype == b.ids.dtype and np.array_equal(a.ids, b.ids)
        assert a.categories == b.categories and a.words == b.words and a.polarity == b.polarity
    assert (one.vectors is None) == (other.vectors is None)
    if one.vectors is not None and other.vectors is not None:
        assert one.vectors.tobytes() == other.vectors.tobytes()
    assert one.digest == other.digest and one.problems == other.problems == []


def test_the_knowledge_is_stored_once_and_read_back_without_embedding(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, libraries_root: Path
) -> None:
    libraries = _libraries(libraries_root)
    path = knowledge_path(hierarchy.build_id, _stamps(libraries), IDENTITY)
    assert not path.exists()
    first_model = IdentifiedEmbedder()
    built = _knowledge(fixture_con, hierarchy, libraries, first_model)
    assert path.is_file() and first_model.calls > 0
    names = {c.cohort_name for c in built.cohorts}
    assert set(built.single_vectors) == names  # each name embedded alone too, as a query is
    second_model = IdentifiedEmbedder()
    read = _knowledge(fixture_con, hierarchy, libraries, second_model)
    assert read is not built and second_model.calls == 0  # nothing read from the libraries or embedded
    _same(built, read)
    # a query that is a cohort name: the stored vector is what the model gives for it alone
    name = built.cohorts[0].cohort_name
    assert read.query_vector(name).tobytes() == FakeEmbedder()([name])[0].tobytes()
    assert second_model.calls == 0
    for query in QUERIES:
        assert built.view(set()).similarities(query).tobytes() == read.view(set()).similarities(query).tobytes()
    assert second_model.texts_seen == [q for q in QUERIES if q not in names]  # only those are embedded


def test_warming_still_embeds_cohort_names_in_one_batch(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, libraries_root: Path
) -> None:
    """Training embeds its cohort names together (``warm``): the stored single-name vectors answer only
    where ``query_vector`` would have embedded one name alone."""
    libraries = _libraries(libraries_root)
    _knowledge(fixture_con, hierarchy, libraries, IdentifiedEmbedder())
    model = IdentifiedEmbedder()
    read = _knowledge(fixture_con, hierarchy, libraries, model)
    names = [c.cohort_name for c in read.cohorts[:3]]
    read.warm(names)
    assert model.calls == 1 and model.texts_seen == names


def test_a_corrupt_knowledge_file_is_logged_and_built_again(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    libraries_root: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    libraries = _libraries(libraries_root)
    stamps = _stamps(libraries)
    path = knowledge_path(hierarchy.build_id, stamps, IDENTITY)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a numpy archive")
    with pytest.raises(KnowledgeFileError, match="cannot be read"):
        load_knowledge(path, hierarchy, stamps, IDENTITY)
    model = IdentifiedEmbedder()
    with caplog.at_level(logging.WARNING, logger="phenoforge.setbuild.transfer"):
        knowledge = _knowledge(fixture_con, hierarchy, libraries, model)
    assert "curated knowledge unusable, built again" in caplog.text and model.calls > 0
    _same(knowledge, _knowledge(fixture_con, hierarchy, libraries, IdentifiedEmbedder()))  # replaced by a good one


def _with_checksum(path: Path, **changes: np.ndarray) -> None:
    """Change arrays and write a checksum that matches them: only the content checks can refuse it."""
    arrays = {**read_npz(path), **changes}
    arrays.pop("checksum", None)
    arrays["checksum"] = np.array(knowledge_store._checksum(arrays))
    write_npz(path, arrays)


def test_a_changed_or_foreign_knowledge_file_is_refused(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, libraries_root: Path
) -> None:
    libraries = _libraries(libraries_root)
    stamps = _stamps(libraries)
    built = _knowledge(fixture_con, hierarchy, libraries, IdentifiedEmbedder())
    path = knowledge_path(hierarchy.build_id, stamps, IDENTITY)
    original = read_npz(path)
    assert built.vectors is not None
    rewrite_npz(path, vectors=built.vectors * 0.5)  # a vector edited, the checksum not
    with pytest.raises(KnowledgeFileError, match="checksum"):
        load_knowledge(path, hierarchy, stamps, IDENTITY)
    meta = json.loads(str(original["meta"]))
    for field, value, message in [
        ("build_id", "another-build", "another vocabulary build"),
        ("identity", "another-model", "another embedding"),
        ("stamps", [["fixture-train", "0" * 16]], "another libraries"),
        ("format", 99, "another format"),
    ]:
        _with_checksum(path, **{**original, "meta": np.array(json.dumps({**meta, field: value}))})
        with pytest.raises(KnowledgeFileError, match=message):
            load_knowledge(path, hierarchy, stamps, IDENTITY)
    unknown = original["ids"].copy()
    unknown[0] = 10**12
    _with_checksum(path, **{**original, "ids": unknown})
    with pytest.raises(KnowledgeFileError, match="concept id outside"):
        load_knowledge(path, hierarchy, stamps, IDENTITY)
    _with_checksum(path, **{**original, "id_offsets": original["id_offsets"][:-1]})
    with pytest.raises(KnowledgeFileError, match="offsets do not add up"):
        load_knowledge(path, hierarchy, stamps, IDENTITY)
    _with_checksum(path, **{**original, "vectors": original["vectors"][:-1]})
    with pytest.raises(KnowledgeFileError, match="float32 rows"):
        load_knowledge(path, hierarchy, stamps, IDENTITY)


def test_each_state_has_its_own_file(hierarchy: Hierarchy) -> None:
    stamps = [("lib", "a" * 16)]
    path = knowledge_path(hierarchy.build_id, stamps, IDENTITY)
    assert hierarchy.build_id in path.name
    assert path != knowledge_path("another-build", stamps, IDENTITY)
    assert path != knowledge_path(hierarchy.build_id, [("lib", "b" * 16)], IDENTITY)
    assert path != knowledge_path(hierarchy.build_id, stamps, "another-model")
    assert path != knowledge_path(hierarchy.build_id, stamps, "no embedding")


def test_an_edited_library_is_read_again(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    folder = write_icd_library(tmp_path / "other", OTHER_COHORTS, library_id="fixture-other")
    before = _knowledge(fixture_con, hierarchy, [load_library(folder)], IdentifiedEmbedder())
    edited = {**OTHER_COHORTS, "x-hf": ("Congestive heart failure", ["I50.2"], True)}
    write_icd_library(tmp_path / "other", edited, library_id="fixture-other")
    model = IdentifiedEmbedder()
    after = _knowledge(fixture_con, hierarchy, [load_library(folder)], model)
    assert model.calls > 0  # another stamp, another file: computed from the files
    hf = {c.cohort_id: c.ids.tolist() for c in after.cohorts}["x-hf"]
    assert hf != {c.cohort_id: c.ids.tolist() for c in before.cohorts}["x-hf"]
    assert set(hf) == {hierarchy.resolve(code) for code in ["I50.2", "I50.20", "I50.21", "I50.22", "I50.23"]} - {None}


def test_an_embedding_without_identity_is_never_stored(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, libraries_root: Path
) -> None:
    assert embed_identity(FakeEmbedder()) is None and embed_identity(IdentifiedEmbedder()) == IDENTITY
    libraries = _libraries(libraries_root)
    for _time in range(2):
        model = FakeEmbedder()
        knowledge = _knowledge(fixture_con, hierarchy, libraries, model)
        assert model.calls == 1 and knowledge.single_vectors == {}  # the names in one batch, as ever
    models = Path(knowledge_path(hierarchy.build_id, [], IDENTITY)).parent
    assert not models.exists() or not list(models.glob("curated-knowledge-*"))


def test_the_knowledge_without_embedding_is_stored_too(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, libraries_root: Path
) -> None:
    libraries = _libraries(libraries_root)
    built = _knowledge(fixture_con, hierarchy, libraries, None)
    assert knowledge_path(hierarchy.build_id, _stamps(libraries), "no embedding").is_file()
    read = _knowledge(fixture_con, hierarchy, libraries, None)
    _same(built, read)
    assert read.vectors is None and read.embed is None


def test_an_unwritable_models_folder_keeps_the_knowledge_for_this_process(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    libraries_root: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    libraries = _libraries(libraries_root)
    models = knowledge_path(hierarchy.build_id, [], IDENTITY).parent
    models.parent.mkdir(parents=True, exist_ok=True)
    models.write_text("a file where the folder should be", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="phenoforge.setbuild.transfer"):
        knowledge = _knowledge(fixture_con, hierarchy, libraries, IdentifiedEmbedder())
    assert "curated knowledge not stored" in caplog.text
    assert knowledge.cohorts and knowledge.vectors is not None and len(knowledge.vectors) == len(knowledge.cohorts)


def test_a_library_left_out_is_not_stored(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    """Knowledge missing an unreadable library is computed per process: the file, once readable, must count."""
    good = write_icd_library(tmp_path / "other", OTHER_COHORTS, library_id="fixture-other")
    broken = write_icd_library(tmp_path / "broken", OTHER_COHORTS, library_id="fixture-broken")
    library = load_library(broken)
    for entry in library.manifest.cohorts:
        (broken / entry.file).write_text("{}", encoding="utf-8")  # no concept set, no PrimaryCriteria
    libraries = [load_library(good), library]
    knowledge = _knowledge(fixture_con, hierarchy, libraries, IdentifiedEmbedder())
    assert knowledge.problems and "fixture-broken left out" in knowledge.problems[0]
    assert {c.library_id for c in knowledge.cohorts} == {"fixture-other"}
    assert not knowledge_path(hierarchy.build_id, _stamps(libraries), IDENTITY).exists()


class OtherIdentifiedEmbedder(FakeEmbedder):
    """Another model (another precision, say) in the same process: other vectors, another identity."""

    identity = "fake-embedder-2"

    def __call__(self, texts: list[str]) -> np.ndarray:
        return -super().__call__(texts)


def test_another_embedder_in_the_same_process_gets_its_own_vectors(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, libraries_root: Path
) -> None:
    # the per-process cache was keyed on the libraries and "some embedding" only: a second embedder with
    # another identity got the first one's vectors (and its embed function for queries)
    libraries = _libraries(libraries_root)
    first = curated_knowledge(fixture_con, hierarchy, libraries, library_stamp, IdentifiedEmbedder(), IDENTITY)
    other_model = OtherIdentifiedEmbedder()
    other = curated_knowledge(
        fixture_con, hierarchy, libraries, library_stamp, other_model, embed_identity(other_model)
    )
    assert first.vectors is not None and other.vectors is not None
    assert np.array_equal(other.vectors, -first.vectors)
    assert other.embed is other_model
    again = curated_knowledge(fixture_con, hierarchy, libraries, library_stamp, IdentifiedEmbedder(), IDENTITY)
    assert again is first  # the same embedder still gets the process's cached knowledge


def _not_json(original: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"groups": np.array(["not json"] * len(original["groups"]))}


def _nan_vector(original: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    vectors = original["vectors"].copy()
    vectors[0, 0] = np.nan
    return {"vectors": vectors}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_not_json, "library groups"),
        (_nan_vector, "not finite"),
        (lambda original: {"ids": original["ids"].astype(np.float64) + 0.5}, "not 1-d int64"),
        (lambda original: {"cohort_names": original["cohort_names"].reshape(-1, 1)}, "not 1-d text"),
        (lambda original: {"single_names": np.array(["x"] * len(original["single_names"]))}, "stored twice"),
    ],
)
def test_a_foreign_file_with_a_matching_checksum_is_refused_not_a_crash(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    libraries_root: Path,
    change: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    message: str,
) -> None:
    # these passed the checksum and then crashed the caller (JSONDecodeError, AttributeError) or were used
    # (NaN vectors, float concept ids, one name's vector for every name)
    libraries = _libraries(libraries_root)
    stamps = _stamps(libraries)
    built = _knowledge(fixture_con, hierarchy, libraries, IdentifiedEmbedder())
    path = knowledge_path(hierarchy.build_id, stamps, IDENTITY)
    original = read_npz(path)
    _with_checksum(path, **{**original, **change(original)})
    with pytest.raises(KnowledgeFileError, match=message):
        load_knowledge(path, hierarchy, stamps, IDENTITY)
    model = IdentifiedEmbedder()
    _same(built, _knowledge(fixture_con, hierarchy, libraries, model))  # built again, not used
    assert model.calls > 0

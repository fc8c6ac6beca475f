"""Dense retrieval on the fixture vocabulary with the fake embedder (one test loads the model)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import duckdb
import numpy as np
import pytest

from phenoforge.engine import dense
from phenoforge.engine.dense import (
    DenseIndexNotReady,
    DenseRetriever,
    concept_texts,
    dense_index_status,
    ensure_dense_index,
    load_dense_if_ready,
)
from phenoforge.engine.dense import store as dense_store
from phenoforge.engine.dense import texts as dense_texts
from phenoforge.engine.query import query_problem
from phenoforge.engine.schema import RETRIEVABLE_KINDS
from phenoforge.errors import IndexError_, PhenoforgeError
from tests.engine.fake_embedder import FakeEmbedder
from tests.fixture_vocab import FIXTURE_NODES, build_fixture_vocab

RETRIEVABLE = [code for code, _name, kind, _parents in FIXTURE_NODES if kind in RETRIEVABLE_KINDS]


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "dense"


@pytest.fixture
def built(fixture_con: duckdb.DuckDBPyConnection, index_dir: Path) -> DenseRetriever:
    return ensure_dense_index(fixture_con, FakeEmbedder(), index_dir)


def _manifest(index_dir: Path) -> dict:
    return json.loads((index_dir / "manifest.json").read_text())


def test_build_embeds_every_retrievable_code(built: DenseRetriever, index_dir: Path) -> None:
    assert built.is_ready
    manifest = _manifest(index_dir)
    assert manifest["count"] == len(RETRIEVABLE)
    assert manifest["model"] == dense.DEFAULT_MODEL_NAME
    assert manifest["text_recipe"] == dense.TEXT_RECIPE_VERSION
    assert manifest["vocabulary_release"] == "phenoforge test fixture"
    assert len(manifest["vocabulary_build_id"]) == 32
    vectors = np.load(index_dir / manifest["vectors_file"])
    assert vectors.shape == (len(RETRIEVABLE), 256)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    codes = json.loads((index_dir / manifest["codes_file"]).read_text())
    assert sorted(codes) == sorted(RETRIEVABLE)
    assert "E11" in codes and "E08-E13" not in codes and "4" not in codes
    assert dense_index_status(built.con, index_dir).state == "ready"


def test_default_index_dir_is_under_the_data_dir(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    retriever = ensure_dense_index(fixture_con, FakeEmbedder())
    assert retriever.index_dir == tmp_path / "data" / "dense"
    assert (tmp_path / "data" / "dense" / "manifest.json").exists()


def test_search_finds_lexical_neighbours_with_provenance(built: DenseRetriever) -> None:
    result = built.search("heart failure", k=5)
    assert result.method == "dense" and result.reason is None
    assert len(result.hits) == 5
    assert result.hits[0].code.startswith("I50")
    assert [hit.rank for hit in result.hits] == [1, 2, 3, 4, 5]
    scores = [hit.score for hit in result.hits]
    assert scores == sorted(scores, reverse=True)
    first = result.hits[0]
    assert first.name == {code: name for code, name, _k, _p in FIXTURE_NODES}[first.code]
    assert first.provenance[0].retriever == "dense"
    assert first.provenance[0].query == "heart failure"
    assert first.provenance[0].rank == 1
    assert first.provenance[0].score == pytest.approx(first.score)


def test_synonyms_are_embedded(built: DenseRetriever) -> None:
    # "Kimmelstiel-Wilson" is only an inclusion term of E11.21.
    assert built.search("Kimmelstiel Wilson", k=1).codes == ["E11.21"]


def test_ranking_is_sorted_and_capped(built: DenseRetriever) -> None:
    ranking = built.ranking("type 2 diabetes mellitus", 4)
    assert len(ranking) == 4
    assert [score for _c, score in ranking] == sorted((s for _c, s in ranking), reverse=True)
    assert all(code in RETRIEVABLE for code, _s in ranking)
    assert ranking[0][0].startswith("E11")
    everything = built.ranking("asthma", 10_000)
    assert sorted(code for code, _s in everything) == sorted(RETRIEVABLE)
    assert built.ranking("asthma", 0) == []


def test_reuse_does_not_re_embed(built: DenseRetriever, index_dir: Path) -> None:
    fake = FakeEmbedder()
    again = ensure_dense_index(built.con, fake, index_dir)
    assert again.is_ready and fake.calls == 0
    again.search("asthma")
    assert fake.calls == 1  # only the query
    assert load_dense_if_ready(built.con, index_dir, FakeEmbedder()) is not None


def test_build_embeds_each_distinct_text_once_shortest_first(
    fixture_con: duckdb.DuckDBPyConnection, index_dir: Path
) -> None:
    fake = FakeEmbedder()
    DenseRetriever(fixture_con, fake, index_dir).build(mode="exact")
    assert len(fake.texts_seen) == len(set(fake.texts_seen))
    lengths = [len(text) for text in fake.texts_seen]
    assert lengths == sorted(lengths)
    items = concept_texts(fixture_con)
    assert set(fake.texts_seen) == set(items.texts)


def test_duplicate_texts_are_embedded_once() -> None:
    fake = FakeEmbedder()
    vectors, _calls = dense.embed_unique(["b c", "a", "b c", "a"], fake)
    assert fake.texts_seen == ["a", "b c"]
    assert np.allclose(vectors[0], vectors[2]) and np.allclose(vectors[1], vectors[3])


SITES = [
    "right femur",
    "left femur",
    "right tibia",
    "left tibia",
    "right humerus",
    "left humerus",
    "right radius",
    "left radius",
    "right ulna",
    "left ulna",
    "sacrum",
    "coccyx",
]
SUFFIXES = ["initial encounter", "subsequent encounter", "sequela"]


def _seventh_character_vocab(path: Path) -> Path:
    """12 stems x 3 suffixes: enough 7th-character codes per suffix to compose some."""
    from phenoforge.engine.codes import code_key
    from phenoforge.engine.schema import ICD10CM
    from phenoforge.engine.vocab_build import VocabularyRows, write_vocabulary

    rows = VocabularyRows(metadata={"source": "fixture", "vocabulary_release": "7th-char test"})
    rows.concepts.append((1, ICD10CM, "S", "S", "Injuries", "chapter", False, None, None, None))
    next_id = 2
    for index, site in enumerate(SITES):
        stem_code = f"S{index:02d}.00"
        stem_id = next_id
        rows.concepts.append(
            (
                stem_id,
                ICD10CM,
                stem_code,
                code_key(stem_code),
                f"Fracture of {site}",
                "subcategory",
                False,
                None,
                None,
                None,
            )
        )
        rows.parents.append((stem_id, 1))
        next_id += 1
        for letter, suffix in zip("ADS", SUFFIXES, strict=True):
            code = f"{stem_code}X{letter}"
            rows.concepts.append(
                (
                    next_id,
                    ICD10CM,
                    code,
                    code_key(code),
                    f"Fracture of {site}, {suffix}",
                    "extension",
                    True,
                    None,
                    None,
                    None,
                )
            )
            rows.parents.append((next_id, stem_id))
            next_id += 1
    return write_vocabulary(path, rows)


def test_composed_mode_learns_suffix_offsets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense_texts, "OFFSET_SAMPLES", 4)
    con = duckdb.connect(str(_seventh_character_vocab(tmp_path / "v.duckdb")), read_only=True)
    try:
        fake = FakeEmbedder()
        retriever = DenseRetriever(con, fake, tmp_path / "dense")
        retriever.build(mode="composed")
        assert retriever.manifest is not None and retriever.manifest.mode == "composed"
        seen = set(fake.texts_seen)
        extension_texts = [f"Fracture of {site}, {suffix}" for site in SITES for suffix in SUFFIXES]
        embedded = [text for text in extension_texts if text in seen]
        assert len(embedded) == 4 * len(SUFFIXES)  # the offset training codes only
        assert retriever.manifest.n_texts_embedded == len(SITES) + len(embedded)
        # a bag of words is additive, so stem + learned offset lands close to the exact vector
        for site in ("coccyx", "left ulna"):
            for letter, suffix in zip("ADS", SUFFIXES, strict=True):
                code = f"S{SITES.index(site):02d}.00X{letter}"
                row = retriever._codes.index(code)
                exact = fake.embed_one(f"Fracture of {site}, {suffix}")
                assert float(retriever._vectors[row] @ exact) > 0.9, code
        top = retriever.search("fracture of coccyx sequela", k=1).codes
        assert top == [f"S{SITES.index('coccyx'):02d}.00XS"]
        exact_fake = FakeEmbedder()
        exact = DenseRetriever(con, exact_fake, tmp_path / "exact")
        exact.build(mode="exact")
        assert set(extension_texts) <= set(exact_fake.texts_seen)
        assert exact.manifest is not None
        assert exact.manifest.n_texts_embedded > retriever.manifest.n_texts_embedded
    finally:
        con.close()


def test_exact_mode_embeds_seventh_character_texts(fixture_con: duckdb.DuckDBPyConnection, index_dir: Path) -> None:
    fake = FakeEmbedder()
    retriever = ensure_dense_index(fixture_con, fake, index_dir, mode="exact")
    extension = "Fracture of unspecified part of neck of right femur, initial encounter for closed fracture"
    assert extension in fake.texts_seen
    row = retriever._codes.index("S72.001A")
    assert np.allclose(retriever._vectors[row], fake.embed_one(extension), atol=1e-6)
    # asking for the other mode makes the index stale for that caller
    other = FakeEmbedder()
    composed = ensure_dense_index(fixture_con, other, index_dir, mode="composed")
    assert other.calls > 0 and composed.manifest is not None
    assert composed.manifest.mode == "composed"


def test_progress_is_reported_with_increasing_done(
    fixture_con: duckdb.DuckDBPyConnection, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dense_texts, "BUILD_CHUNK", 7)
    calls: list[tuple[int, int, str]] = []
    ensure_dense_index(fixture_con, FakeEmbedder(), index_dir, progress=lambda d, t, m: calls.append((d, t, m)))
    assert len(calls) >= 4
    dones = [done for done, _t, _m in calls]
    assert dones == sorted(dones)
    assert dones[0] == 0
    assert calls[-1][0] == calls[-1][1]
    assert all(isinstance(message, str) and message for _d, _t, message in calls)


def test_stale_vocabulary_build_is_detected_and_rebuilt(built: DenseRetriever, index_dir: Path, tmp_path: Path) -> None:
    other_path = build_fixture_vocab(tmp_path / "other.duckdb")  # same rows, new build id
    other = duckdb.connect(str(other_path), read_only=True)
    try:
        status = dense_index_status(other, index_dir)
        assert status.state == "stale"
        assert "vocabulary build" in (status.reason or "")
        assert load_dense_if_ready(other, index_dir, FakeEmbedder()) is None
        fake = FakeEmbedder()
        rebuilt = ensure_dense_index(other, fake, index_dir)
        assert fake.calls > 0 and rebuilt.is_ready
        assert dense_index_status(other, index_dir).state == "ready"
        assert dense_index_status(built.con, index_dir).state == "stale"
    finally:
        other.close()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("text_recipe", "name-only-v0", "text recipe"),
        ("model", "other-model", "model"),
        ("format_version", 0, "format"),
    ],
)
def test_stale_manifest_fields(built: DenseRetriever, index_dir: Path, field: str, value: object, words: str) -> None:
    manifest = _manifest(index_dir)
    manifest[field] = value
    (index_dir / "manifest.json").write_text(json.dumps(manifest))
    status = dense_index_status(built.con, index_dir)
    assert status.state == "stale" and words in (status.reason or "")
    assert load_dense_if_ready(built.con, index_dir) is None


def _corrupt_truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_corrupt_truncate, _corrupt_flip, Path.unlink])
def test_corrupt_vectors_are_detected_and_rebuilt(built: DenseRetriever, index_dir: Path, damage) -> None:
    vectors_path = index_dir / _manifest(index_dir)["vectors_file"]
    damage(vectors_path)
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt"
    assert load_dense_if_ready(built.con, index_dir, FakeEmbedder()) is None
    not_ready = DenseRetriever(built.con, FakeEmbedder(), index_dir)
    assert not not_ready.is_ready
    fake = FakeEmbedder()
    rebuilt = ensure_dense_index(built.con, fake, index_dir)
    assert rebuilt.is_ready and fake.calls > 0
    assert dense_index_status(built.con, index_dir).state == "ready"
    assert len(list(index_dir.glob("vectors-*.npy"))) == 1


def test_wrong_shape_with_matching_checksum_is_corrupt(built: DenseRetriever, index_dir: Path) -> None:
    manifest = _manifest(index_dir)
    vectors_path = index_dir / manifest["vectors_file"]
    np.save(vectors_path, np.zeros((3, 256), np.float32))
    manifest["vectors_sha256"] = dense_store._sha256(vectors_path)
    (index_dir / "manifest.json").write_text(json.dumps(manifest))
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and "shape" in (status.reason or "")
    assert not DenseRetriever(built.con, FakeEmbedder(), index_dir).is_ready


def test_unreadable_manifest_is_corrupt(built: DenseRetriever, index_dir: Path) -> None:
    (index_dir / "manifest.json").write_text("{not json")
    assert dense_index_status(built.con, index_dir).state == "corrupt"
    assert ensure_dense_index(built.con, FakeEmbedder(), index_dir).is_ready


def test_missing_index(fixture_con: duckdb.DuckDBPyConnection, index_dir: Path) -> None:
    status = dense_index_status(fixture_con, index_dir)
    assert status.state == "missing" and "phenoforge build" in (status.reason or "")
    assert load_dense_if_ready(fixture_con, index_dir, FakeEmbedder()) is None


def test_query_never_builds(fixture_con: duckdb.DuckDBPyConnection, index_dir: Path) -> None:
    fake = FakeEmbedder()
    retriever = DenseRetriever(fixture_con, fake, index_dir)
    result = retriever.search("heart failure")
    assert result.hits == [] and "build" in (result.reason or "")
    with pytest.raises(DenseIndexNotReady) as raised:
        retriever.ranking("heart failure", 10)
    assert isinstance(raised.value, IndexError_) and isinstance(raised.value, PhenoforgeError)
    assert fake.calls == 0
    assert not (index_dir / "manifest.json").exists()


def test_failed_rebuild_keeps_the_previous_index(built: DenseRetriever, index_dir: Path) -> None:
    before = _manifest(index_dir)

    def broken(texts: list[str]) -> np.ndarray:
        raise RuntimeError("model crashed")

    with pytest.raises(RuntimeError):
        DenseRetriever(built.con, broken, index_dir).build()
    assert _manifest(index_dir) == before
    assert dense_index_status(built.con, index_dir).state == "ready"
    assert not list(index_dir.glob(".*.tmp"))


@pytest.mark.parametrize(
    "query",
    ["", "   \t\n", "heart " * 2000, "心不全 insuffisance cardiaque é", "'; DROP TABLE concept; --", "\x00", "%_*?"],
)
def test_bad_queries_answer_without_raising(built: DenseRetriever, query: str) -> None:
    result = built.search(query, k=5)
    assert result.method == "dense"
    assert result.hits or result.reason
    if not query.strip(" \t\n\x00"):
        assert result.hits == [] and "empty" in (result.reason or "")
    elif query_problem(query) is not None:  # too long, SQL-looking, no words: the reason BM25 gives
        assert result.hits == [] and result.reason == query_problem(query)
        assert built.ranking(query, 3) == []
    else:
        assert len(result.hits) == 5
    assert isinstance(built.ranking(query, 3), list)


def test_deeper_rankings_never_reorder_shallower_ones(built: DenseRetriever) -> None:
    deep = built.ranking("type 2 diabetes mellitus", 30)
    for n in (1, 5, 12):
        assert built.ranking("type 2 diabetes mellitus", n) == deep[:n]


def test_bad_k(built: DenseRetriever) -> None:
    result = built.search("asthma", k=0)
    assert result.hits == [] and "k must be" in (result.reason or "")


@pytest.mark.model
def test_real_model_finds_heart_failure(tmp_path: Path) -> None:
    from phenoforge.engine.db import ensure_vocabulary
    from phenoforge.engine.vocab_build import VocabularyRows, write_vocabulary

    full = duckdb.connect(str(ensure_vocabulary()), read_only=True)
    try:
        wanted = ("I50", "I10", "I11", "E11", "J45", "N18", "F32", "C34", "S72.00")
        clause = " OR ".join("code_key LIKE ?" for _ in wanted)
        params = [prefix.replace(".", "") + "%" for prefix in wanted]
        concepts = full.execute(f"SELECT * FROM concept WHERE {clause} ORDER BY concept_id", params).fetchall()
        ids = [row[0] for row in concepts]
        marks = ", ".join("?" for _ in ids)
        notes = full.execute(f"SELECT * FROM concept_note WHERE concept_id IN ({marks})", ids).fetchall()
        parents = full.execute(f"SELECT * FROM concept_parent WHERE child_id IN ({marks})", ids).fetchall()
        metadata = dict(full.execute("SELECT key, value FROM metadata").fetchall())
    finally:
        full.close()
    assert 200 <= len(concepts) <= 1500
    small_path = write_vocabulary(
        tmp_path / "small.duckdb",
        VocabularyRows(
            concepts=concepts,
            notes=notes,
            parents=parents,
            metadata={"source": "test subset", "vocabulary_release": metadata["vocabulary_release"]},
        ),
    )
    con = duckdb.connect(str(small_path), read_only=True)
    try:
        calls: list[int] = []
        retriever = ensure_dense_index(
            con,
            dense.default_embed_fn(),
            tmp_path / "dense",
            progress=lambda done, total, message: calls.append(done),
        )
        n_retrievable = sum(1 for row in concepts if row[5] in RETRIEVABLE_KINDS)
        assert retriever.is_ready and calls[-1] == n_retrievable
        assert retriever.manifest is not None and retriever.manifest.count == n_retrievable
        assert retriever.manifest is not None and retriever.manifest.dim == 384
        # fp32 on every CPU, bf16 or not: the index, and every list built from it, does not depend on the CPU
        assert retriever.manifest.precision == "fp32"
        top3 = retriever.search("heart failure", k=3).codes
        assert any(code.startswith("I50") for code in top3), top3
        assert retriever.search("asthma attack", k=3).codes[0].startswith("J45")
        assert retriever.search("lung cancer", k=3).codes[0].startswith("C34")
    finally:
        con.close()


# -- status: missing / stale / corrupt told apart, with the command that rebuilds


def test_status_tells_stale_model_apart(built: DenseRetriever, index_dir: Path) -> None:
    status = dense_index_status(built.con, index_dir, model_name="another-model")
    assert status.state == "stale" and status.causes == ["model"]
    assert "another-model" in status.message() and "python -m phenoforge build" in status.message()


def test_status_tells_truncated_vectors_apart(built: DenseRetriever, index_dir: Path) -> None:
    vectors_path = index_dir / _manifest(index_dir)["vectors_file"]
    data = vectors_path.read_bytes()
    vectors_path.write_bytes(data[: len(data) - 100])
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and status.causes == ["truncated"]
    assert "truncated" in status.message() and status.rebuild_command in status.message()


def test_status_tells_checksum_mismatch_apart(built: DenseRetriever, index_dir: Path) -> None:
    vectors_path = index_dir / _manifest(index_dir)["vectors_file"]
    data = bytearray(vectors_path.read_bytes())
    data[-3] ^= 0xFF  # same size, other bytes
    vectors_path.write_bytes(bytes(data))
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and status.causes == ["checksum"]


def test_status_tells_cut_off_manifest_apart(built: DenseRetriever, index_dir: Path) -> None:
    text = (index_dir / "manifest.json").read_text()
    (index_dir / "manifest.json").write_text(text[: len(text) // 2])
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and status.causes == ["manifest"]
    assert "cut-off" in status.message()


def test_load_dense_reports_corrupt_not_missing(
    built: DenseRetriever, index_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (index_dir / _manifest(index_dir)["codes_file"]).write_text("[]")
    retriever, status = dense.load_dense(built.con, index_dir, FakeEmbedder())
    assert retriever is None
    assert status.state == "corrupt" and "not built" not in status.message()
    with caplog.at_level("WARNING"):
        assert load_dense_if_ready(built.con, index_dir, FakeEmbedder()) is None
    assert "is corrupt" in caplog.text and "python -m phenoforge build" in caplog.text


def test_missing_status_message_says_not_built(fixture_con: duckdb.DuckDBPyConnection, index_dir: Path) -> None:
    status = dense_index_status(fixture_con, index_dir)
    assert status.causes == ["missing"] and "not built" in status.message()


# -- batched rankings and the nearest-neighbour graph


BATCH_QUERIES = ["heart failure", "type 2 diabetes", "", "heart failure", "asthma", "   ", "kidney disease stage 4"]


def test_rankings_equal_ranking_per_query(built: DenseRetriever) -> None:
    calls_before = built.embed_calls
    batched = built.rankings(BATCH_QUERIES, 15)
    assert built.embed_calls == calls_before + 1  # one model call for the whole batch
    assert batched == [built.ranking(query, 15) for query in BATCH_QUERIES]
    assert batched[2] == [] and batched[0] and batched[0] == batched[3]


def test_rankings_raise_when_not_ready(fixture_con: duckdb.DuckDBPyConnection, index_dir: Path) -> None:
    with pytest.raises(DenseIndexNotReady):
        DenseRetriever(fixture_con, FakeEmbedder(), index_dir).rankings(["asthma"], 5)


def test_graph_index_gives_the_exact_rankings(
    fixture_con: duckdb.DuckDBPyConnection, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dense_store, "ANN_MIN_ROWS", 1)
    retriever = ensure_dense_index(fixture_con, FakeEmbedder(), index_dir)
    manifest = _manifest(index_dir)
    assert manifest["ann_file"] and (index_dir / manifest["ann_file"]).is_file()
    assert retriever.status.search == "ann"
    for query in ("heart failure", "diabetes with kidney complications", "asthma"):
        queries = retriever._query_vectors([query])
        ((graph_rows, graph_scores),) = retriever._top_many(queries, 10)
        ((exact_rows, exact_scores),) = retriever._top_many(queries, 10, exact=True)
        assert graph_rows.tolist() == exact_rows.tolist()
        assert np.allclose(graph_scores, exact_scores)


def test_a_short_graph_answer_falls_back_to_the_exact_scan(
    fixture_con: duckdb.DuckDBPyConnection, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI once saw the graph miss a true neighbour: a threaded HNSW build over sparse vectors can
    leave rows unreachable, and the graph then answers with fewer rows than it was asked for."""
    monkeypatch.setattr(dense_store, "ANN_MIN_ROWS", 1)
    retriever = ensure_dense_index(fixture_con, FakeEmbedder(), index_dir)
    queries = retriever._query_vectors(["heart failure"])
    ((exact_rows, exact_scores),) = retriever._top_many(queries, 5, exact=True)
    reachable = np.array([row for row in range(len(retriever._vectors)) if row != exact_rows[0]], np.uint64)

    class ShortGraph:
        def search(self, vectors: np.ndarray, count: int) -> SimpleNamespace:
            return SimpleNamespace(keys=reachable[None, :], counts=np.array([len(reachable)]))

    retriever._ann = ShortGraph()
    ((rows, scores),) = retriever._top_many(queries, 5)
    assert rows.tolist() == exact_rows.tolist()
    assert np.allclose(scores, exact_scores)


def test_corrupt_graph_file_is_detected(
    fixture_con: duckdb.DuckDBPyConnection, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dense_store, "ANN_MIN_ROWS", 1)
    ensure_dense_index(fixture_con, FakeEmbedder(), index_dir)
    graph_path = index_dir / _manifest(index_dir)["ann_file"]
    data = bytearray(graph_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph_path.write_bytes(bytes(data))
    status = dense_index_status(fixture_con, index_dir)
    assert status.state == "corrupt" and status.causes == ["checksum"]


def test_vectors_are_memory_mapped(built: DenseRetriever) -> None:
    assert isinstance(built._vectors, np.memmap)


@pytest.mark.model
def test_onnx_runtime_gives_the_torch_vectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path))
    onnx = dense.default_embed_fn(precision="fp32", runtime="onnx")
    torch_fp32 = dense.default_embed_fn(precision="fp32", runtime="torch")
    texts = ["heart failure", "Type 2 diabetes mellitus with diabetic chronic kidney disease"]
    assert np.allclose(onnx(texts), torch_fp32(texts), atol=1e-4)
    assert np.allclose(onnx(texts[:1]), torch_fp32(texts[:1]), atol=1e-4)  # the one-thread query session
    assert dense.describe_embed_fn(onnx) == "onnx-fp32"


@pytest.mark.model
def test_onnx_vectors_ignore_the_batch_and_a_batch_process_keeps_one_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query-vector cache relies on ``batch_invariant``; a benchmark must not hold the weights twice."""
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path))
    texts = ["heart failure", "Type 2 diabetes mellitus with diabetic chronic kidney disease", "asthma"]
    queries_first = dense.default_embed_fn(precision="fp32", runtime="onnx")
    one_by_one = np.vstack([queries_first([text]) for text in texts])
    assert queries_first.open_sessions() == ["query"] and queries_first.batch_invariant
    batch_first = dense.default_embed_fn(precision="fp32", runtime="onnx")
    together = batch_first(texts)
    singles = np.vstack([batch_first([text]) for text in texts])
    assert batch_first.open_sessions() == ["batch"]  # its single texts ran in the batch session
    assert np.array_equal(together, one_by_one) and np.array_equal(singles, one_by_one)  # bit for bit


@pytest.mark.parametrize(
    ("runtime", "noted"), [("torch-bf16", True), ("onnx-int8", True), ("onnx-fp32", False), ("unknown", False)]
)
def test_a_ready_index_says_how_it_was_embedded(
    built: DenseRetriever, index_dir: Path, runtime: str, noted: bool
) -> None:
    # precision="auto" became ONNX fp32 on every CPU; an index built in bf16 before stays ready, and build, Home
    # and the status line said nothing of it: a user could not tell their code lists still came from bf16 vectors
    manifest = _manifest(index_dir)
    manifest["runtime"] = runtime
    (index_dir / "manifest.json").write_text(json.dumps(manifest))
    status = dense_index_status(built.con, index_dir)
    assert status.state == "ready" and status.runtime == runtime  # usable, not stale
    assert runtime in status.message()
    note = status.precision_note()
    assert (note is not None) is noted
    if note is not None:
        assert runtime in note and "build --force" in note and "fp32" in note

"""Shipped query vectors: a cohort name's vector is the shipped one on every CPU; anything else is embedded."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.dense import retriever as dense_retriever
from phenoforge.engine.dense import shipped_queries
from phenoforge.engine.dense.model import DEFAULT_MODEL_NAME
from phenoforge.engine.dense.retriever import DenseRetriever, recording_queries
from phenoforge.engine.dense.shipped import ShippedUnavailable
from phenoforge.engine.dense.shipped_queries import (
    load_shipped_queries,
    shipped_queries_for,
    shipped_queries_identity,
    write_shipped_queries,
)
from tests.engine.fake_embedder import FakeEmbedder

RECIPE = "fixture-recipe-1"


class PinnedLike(FakeEmbedder):
    """The fake embedder dressed as the pinned model in ONNX fp32 with a recipe: what may take shipped vectors."""

    precision = "fp32"
    runtime = "onnx"
    model_name = DEFAULT_MODEL_NAME
    batch_invariant = True

    def __init__(self, recipe: str = RECIPE, bias: float = 0.0) -> None:
        super().__init__(dim=16)
        self.recipe = recipe
        self.identity = recipe + "-this-cpu"
        self.bias = bias

    def __call__(self, texts: list[str]) -> np.ndarray:
        return super().__call__(texts) + np.float32(self.bias)  # another CPU: the same texts, other last bits


@pytest.fixture
def shipped_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "shipped"
    monkeypatch.setattr(shipped_queries, "SHIPPED_DIR", folder)
    load_shipped_queries.cache_clear()
    yield folder
    load_shipped_queries.cache_clear()


@pytest.fixture
def con(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(tmp_path / "empty.duckdb"))


def _ship(texts: list[str], folder: Path, recipe: str = RECIPE) -> np.ndarray:
    vectors = PinnedLike(recipe)(texts)
    write_shipped_queries(texts, vectors, recipe, folder)
    return vectors


def test_a_shipped_text_reads_the_shipped_vector_and_another_is_embedded(
    shipped_dir: Path, con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    shipped = _ship(["Congestive heart failure", "Gout"], shipped_dir)
    other_cpu = PinnedLike(bias=1e-3)  # its own vectors differ from the shipped ones
    retriever = DenseRetriever(con, other_cpu, tmp_path / "no-index")
    vectors = retriever.embed_queries(["Gout", "asthma", "Congestive heart failure"])
    np.testing.assert_array_equal(vectors[0], shipped[1])
    np.testing.assert_array_equal(vectors[2], shipped[0])
    np.testing.assert_array_equal(vectors[1], other_cpu(["asthma"])[0])  # not shipped: embedded here
    assert retriever.shipped_queries == 2
    assert other_cpu.texts_seen.count("asthma") == 2 and "Gout" not in other_cpu.texts_seen


def test_another_recipe_embeds_every_text_itself(
    shipped_dir: Path, con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    _ship(["Gout"], shipped_dir)
    other_model = PinnedLike(recipe="another-recipe", bias=1e-3)
    assert shipped_queries_for(other_model) is None
    retriever = DenseRetriever(con, other_model, tmp_path / "no-index")
    retriever.embed_queries(["Gout"])
    assert retriever.shipped_queries == 0 and other_model.texts_seen == ["Gout"]


def test_a_test_embedder_never_takes_them(shipped_dir: Path) -> None:
    _ship(["Gout"], shipped_dir)
    assert shipped_queries_for(FakeEmbedder()) is None  # not the pinned model in ONNX fp32


def test_an_edited_file_is_refused_and_nothing_is_shipped(shipped_dir: Path) -> None:
    _ship(["Gout", "Asthma"], shipped_dir)
    path = shipped_dir / shipped_queries.QUERIES_FILE
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    load_shipped_queries.cache_clear()
    with pytest.raises(ShippedUnavailable, match="checksum"):
        load_shipped_queries()
    assert shipped_queries_for(PinnedLike()) is None
    assert shipped_queries_identity() is None


def test_no_file_means_no_shipped_vectors(shipped_dir: Path) -> None:
    with pytest.raises(ShippedUnavailable, match="missing"):
        load_shipped_queries()
    assert shipped_queries_identity() is None


def test_a_text_given_twice_is_refused(shipped_dir: Path) -> None:
    with pytest.raises(ValueError, match="share a key"):
        write_shipped_queries(["Gout", "Gout"], np.zeros((2, 4), np.float32), RECIPE, shipped_dir)


def test_the_identity_names_the_vectors_not_the_machine(shipped_dir: Path) -> None:
    _ship(["Gout"], shipped_dir)
    first = shipped_queries_identity()
    _ship(["Gout", "Asthma"], shipped_dir)
    assert first is not None and shipped_queries_identity() not in (None, first)


def test_recording_collects_every_text_asked_for_cached_or_not(
    shipped_dir: Path, con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    retriever = DenseRetriever(con, PinnedLike(), tmp_path / "no-index")
    retriever.embed_queries(["Gout"])  # cached before the recording starts
    with recording_queries() as texts:
        retriever.embed_queries(["Gout", "Asthma"])
    retriever.embed_queries(["after"])
    assert texts == {"Gout", "Asthma"}
    assert dense_retriever._RECORDINGS == []


def test_exact_cosines_agree_whatever_the_summation_order() -> None:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((500, 384)).astype(np.float32)
    query = rng.standard_normal(384).astype(np.float32)
    forward = dense_retriever.exact_cosines(rows, query)
    # another kernel's order of the same sum: the columns permuted (float32 BLAS would differ in its last bit)
    order = rng.permutation(384)
    permuted = dense_retriever.exact_cosines(rows[:, order], query[order])
    np.testing.assert_array_equal(forward, permuted)
    assert forward.dtype == np.float32


def test_rescored_top_n_is_the_exact_top_n() -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((3000, 64)).astype(np.float32)
    query = rng.standard_normal(64).astype(np.float32)
    noisy = (vectors @ query) + rng.uniform(-1e-6, 1e-6, 3000).astype(np.float32)  # another CPU's rounding
    rows, scores = dense_retriever._rescored(vectors, noisy, query, 50)
    exact = dense_retriever.exact_cosines(vectors, query)
    expected = np.lexsort((np.arange(3000), -exact))[:50]
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_array_equal(scores, exact[expected])


# -- found by a hostile pass (each test failed before its fix)


def test_an_empty_shipped_table_does_not_break_every_query(
    shipped_dir: Path,
    con: duckdb.DuckDBPyConnection,
    tmp_path: Path,
) -> None:
    """Hostile pass: ``write_shipped_queries`` accepts no texts (what ``scripts/ship_fits.py`` writes when
    it recorded none: ``embed_queries([])`` gives a (0, 0) array) and the table loads and verifies; then every
    query any user embeds fails: ``out[found] = vectors`` broadcasts the (0, 0) lookup into (0, dim)."""
    embed = PinnedLike()
    try:
        # the real ONNX embed function answers no texts with np.zeros((0, 0)) (model._onnx_embed_fn)
        write_shipped_queries([], np.zeros((0, 0), np.float32), RECIPE, shipped_dir)
    except ValueError:
        return  # refusing to ship an empty table is a fix too
    load_shipped_queries.cache_clear()
    retriever = DenseRetriever(con, embed, tmp_path / "no-index")
    vectors = retriever.embed_queries(["Gout", "Asthma"])
    np.testing.assert_array_equal(vectors, embed(["Gout", "Asthma"]))


def test_recording_from_two_threads_ends_with_nothing_recorded() -> None:
    """Hostile pass: ``recording_queries`` keeps one process-wide set and restores "the previous"
    one on exit; two recordings that overlap in two threads (the dashboard, a bench script) leave the first
    one's set installed for good: every later query of the process is added to it (it grows without end) and
    the second recording stopped collecting when the first ended."""
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with recording_queries():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with recording_queries():
            second_in.set()
            first_out.wait(5)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert dense_retriever._RECORDINGS == []


def test_the_ort_optimisation_level_is_part_of_the_embedding_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile pass: ``PHENOFORGE_ORT_OPTIMIZATION`` changes a text's vector in its last bits (its own
    docstring says so: that is what it simulates), but neither ``recipe`` nor ``identity`` names it, so vectors
    cached under the identity (the curated knowledge's cohort-name vectors in data/models) made with one level are
    read by a process running the other as its own."""
    from phenoforge.engine.dense import model

    fake_export = tmp_path / "fake.onnx"
    fake_export.write_bytes(b"not a model: the session opens only on the first embedding")
    monkeypatch.setattr(model, "export_onnx", lambda *_a, **_k: fake_export)
    identities = []
    for level in ("all", "disabled"):
        monkeypatch.setenv(model.ORT_OPTIMIZATION_ENV, level)
        identities.append(model._onnx_embed_fn(64, "fp32", 128, None).identity)
    assert identities[0] != identities[1]


@pytest.mark.parametrize(
    ("variable", "call"),
    [
        ("PHENOFORGE_FIT_CHOICES", "phenoforge.setbuild.shipped_fits:fit_choices_mode"),
        ("PHENOFORGE_ORT_OPTIMIZATION", "phenoforge.engine.dense.model:ort_optimization_level"),
    ],
)
def test_a_misspelt_setting_is_an_error_the_cli_shows(
    variable: str, call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile pass: a misspelt PHENOFORGE_FIT_CHOICES (or PHENOFORGE_ORT_OPTIMIZATION) raises a bare
    ValueError from deep in ``fit_builders``: ``run_benchmark`` aborts as a whole (bm25 and every other method too)
    and the CLI, which shows only ``PhenoforgeError`` as ``error: ...``, prints a traceback."""
    import importlib

    from phenoforge.errors import PhenoforgeError

    module, _, name = call.partition(":")
    monkeypatch.setenv(variable, "yes")
    with pytest.raises(PhenoforgeError):
        getattr(importlib.import_module(module), name)()


def test_a_shallow_rescored_ranking_is_a_prefix_of_a_deeper_one() -> None:
    """Hostile pass: ``_top_many`` promises every ``n`` is a prefix of a deeper ranking (the harness
    takes several methods' answers from one deep query; ``top_indices``' "prefix-stable" cut gave it before).
    ``_rescored`` re-scores only the fp32 scan's top ``n + RESCORE_MARGIN``: with more than 64 rows inside the fp32
    rounding band at the cut (a cluster of near-duplicate texts), the exact top ``n`` of a shallow query is taken
    from another subset of the cluster than a deep query's, and the shallow list is not the deep list's prefix."""
    rng = np.random.default_rng(3)
    dim = 64
    query = rng.standard_normal(dim).astype(np.float32)
    query /= np.linalg.norm(query)
    base = rng.standard_normal(dim).astype(np.float32)
    base = base / np.linalg.norm(base) + query  # a text near the query (cosine ~0.7)
    base /= np.linalg.norm(base)
    cluster = base + rng.standard_normal((400, dim)).astype(np.float32) * np.float32(1e-7)  # near-duplicate texts
    vectors = np.vstack([cluster, rng.standard_normal((2000, dim)).astype(np.float32) * np.float32(0.01)])
    exact = dense_retriever.exact_cosines(vectors, query)
    fp32 = exact + rng.uniform(-2e-7, 2e-7, len(exact)).astype(np.float32)  # a float32 scan's rounding
    shallow, _ = dense_retriever._rescored(vectors, fp32, query, 20)
    deep, _ = dense_retriever._rescored(vectors, fp32, query, 320)
    np.testing.assert_array_equal(shallow, deep[:20])

"""The dense retriever's query-vector cache: the same vectors as the model, bounded, never stale."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.dense import retriever as dense_retriever
from phenoforge.engine.dense.retriever import DenseRetriever, ensure_dense_index
from phenoforge.methods.retrieval import Retrieval
from phenoforge.setbuild.transfer import embed_fn_of
from tests.engine.fake_embedder import FakeEmbedder


class InvariantEmbedder(FakeEmbedder):
    """The fake model, declaring what the ONNX one declares: a text's vector ignores its batch."""

    batch_invariant = True


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "dense"


@pytest.fixture
def built(fixture_con: duckdb.DuckDBPyConnection, index_dir: Path) -> DenseRetriever:
    ensure_dense_index(fixture_con, FakeEmbedder(), index_dir)
    return DenseRetriever(fixture_con, InvariantEmbedder(), index_dir)


def test_each_text_is_embedded_once_and_answers_the_models_vector(built: DenseRetriever) -> None:
    model = built.embed_fn
    first = built.embed_queries(["asthma", "heart failure", "asthma"])
    assert model.calls == 1 and model.texts_seen == ["asthma", "heart failure"]  # repeats embedded once
    again = built.embed_queries(["heart failure", "kidney disease", "asthma"])
    assert model.calls == 2 and model.texts_seen[-1:] == ["kidney disease"]  # only the new text
    fresh = FakeEmbedder()(["heart failure", "kidney disease", "asthma"])
    assert np.array_equal(again, fresh) and np.array_equal(first[0], first[2])
    calls = model.calls
    assert built.rankings(["asthma", "heart failure"], 5) == built.rankings(["asthma", "heart failure"], 5)
    assert model.calls == calls  # rankings of known texts do not run the model


def test_the_cache_keeps_the_newest_texts_only(built: DenseRetriever, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense_retriever, "QUERY_CACHE_SIZE", 3)
    built.embed_queries(["a1", "a2", "a3"])
    built.embed_queries(["a1"])  # used again: now the newest
    built.embed_queries(["a4"])
    assert list(built._query_cache) == ["a3", "a1", "a4"]  # a2, the least recently used, went
    seen = len(built.embed_fn.texts_seen)
    built.embed_queries(["a2"])
    assert built.embed_fn.texts_seen[seen:] == ["a2"] and len(built._query_cache) == 3


def test_another_model_or_a_clear_forgets_every_vector(built: DenseRetriever) -> None:
    built.embed_queries(["asthma"])
    other = InvariantEmbedder(dim=256)
    built._embed_fn = other
    built.embed_queries(["asthma"])
    assert other.texts_seen == ["asthma"]  # not the first model's vector
    built.clear_query_cache()
    built.embed_queries(["asthma"])
    assert other.texts_seen == ["asthma", "asthma"]


def test_a_batch_dependent_model_is_never_cached(fixture_con: duckdb.DuckDBPyConnection, index_dir: Path) -> None:
    retriever = ensure_dense_index(fixture_con, FakeEmbedder(), index_dir)
    model = retriever.embed_fn
    retriever.embed_queries(["asthma"])
    retriever.embed_queries(["asthma"])
    assert model.texts_seen.count("asthma") == 2 and not retriever._query_cache


def test_the_curated_knowledge_embeds_through_the_cache(built: DenseRetriever) -> None:
    embed = embed_fn_of(built)
    assert embed is not None
    built.rankings(["Heart failure"], 5)
    calls = built.embed_fn.calls
    assert np.array_equal(embed(["Heart failure"]), FakeEmbedder()(["Heart failure"]))
    assert built.embed_fn.calls == calls


def test_packed_rankings_read_back_as_the_retrievers_rankings(
    fixture_con: duckdb.DuckDBPyConnection, built: DenseRetriever
) -> None:
    queries = ["Heart failure", "asthma", "type 2 diabetes", "Heart failure", ""]
    retrieval = Retrieval(fixture_con, built, 5)
    retrieval.prefetch(queries, depth=40)
    distinct = list(dict.fromkeys(queries))  # what prefetch asks, in one call (its floats depend on the block)
    expected = dict(zip(distinct, built.rankings(distinct, 40), strict=True))
    assert expected["Heart failure"] and expected[""] == []
    for query in queries:
        for depth in (1, 5, 40):
            assert retrieval.dense_ranking(query, depth) == expected[query][:depth]
    assert retrieval.dense_ranking("kidney disease", 60) == built.ranking("kidney disease", 60)  # not prefetched


class _IntScores:
    """A plugin retriever whose scores are not Python floats: kept exactly as it answered."""

    def ranking(self, query: str, n: int) -> list[tuple[str, object]]:
        return [("E11.9", np.float32(0.5)), ("J45", 1)][:n]


def test_a_ranking_of_other_score_types_is_kept_as_given(fixture_con: duckdb.DuckDBPyConnection) -> None:
    retrieval = Retrieval(fixture_con, _IntScores(), 5)
    retrieval.prefetch(["asthma"])
    ranking = retrieval.dense_ranking("asthma", 2)
    assert ranking == [("E11.9", np.float32(0.5)), ("J45", 1)] and type(ranking[0][1]) is np.float32


def test_released_pages_read_back_the_same_vectors(built: DenseRetriever, tmp_path: Path) -> None:
    """Dropping the mapped vectors from the resident set must not change a ranking (the kernel maps
    them back from its page cache); an array that is not mapped is left alone."""
    assert isinstance(built._vectors, np.memmap)
    before = built.rankings(["Heart failure", "asthma"], 30)
    copy = np.array(built._vectors)
    assert dense_retriever.release_mapped_pages(built._vectors)
    assert dense_retriever.release_mapped_pages(built._vectors[2:7])  # a view finds its mapping
    assert np.array_equal(np.asarray(built._vectors), copy)
    assert built.rankings(["Heart failure", "asthma"], 30) == before
    assert not dense_retriever.release_mapped_pages(copy)

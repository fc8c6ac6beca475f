"""The shipped vectors against the pinned model run here: each text's shipped vector is within cosine 0.999 of
the one this machine embeds, and clinical queries rank the same top 10 either way."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from phenoforge.engine.dense.model import default_embed_fn
from phenoforge.engine.dense.shipped import load_shipped, text_key
from phenoforge.engine.dense.texts import DEFAULT_BUILD_MODE, compute_index, concept_texts
from tests.engine.fake_embedder import FakeEmbedder

CLINICAL_QUERIES = (
    "heart failure",
    "type 2 diabetes mellitus",
    "chronic obstructive pulmonary disease",
    "gout",
    "high blood pressure",
    "fracture of the hip",
    "major depressive disorder",
    "chronic kidney disease",
)
POOL = 150
"""Texts per query re-embedded here: the shipped top 150 holds the exact top 10 unless a shipped score is off by
more than the gap between rank 10 and rank 150, which the cosine bound rules out."""


@pytest.fixture(scope="module")
def build_texts(real_con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every text a default build of the real vocabulary embeds (recorded through a fake: no model run)."""
    fake = FakeEmbedder(dim=8)
    compute_index(concept_texts(real_con), fake, DEFAULT_BUILD_MODE)
    return list(dict.fromkeys(fake.texts_seen))


def test_every_text_a_build_embeds_is_shipped(build_texts: list[str]) -> None:
    found, _ = load_shipped().lookup(build_texts)
    assert found.all(), f"{int((~found).sum())} of {len(build_texts)} texts are not shipped"


def test_shipped_vectors_match_the_model_and_rank_queries_alike(build_texts: list[str]) -> None:
    shipped = load_shipped()
    embed = default_embed_fn(precision="fp32")
    rng = np.random.default_rng(0)
    sample = [build_texts[i] for i in rng.choice(len(build_texts), size=300, replace=False)]
    found, stored = shipped.lookup(sample)
    assert found.all()
    cosine = np.sum(stored * embed(sample), axis=1)
    assert cosine.min() >= 0.999, f"lowest cosine {cosine.min():.5f}"

    _, every = shipped.lookup(build_texts)
    for query in CLINICAL_QUERIES:
        vector = embed([query])[0]
        pool = np.argsort(-(every @ vector), kind="stable")[:POOL]
        local = embed([build_texts[i] for i in pool]) @ vector
        shipped_order = [build_texts[i] for i in pool[:10]]
        local_order = [build_texts[pool[i]] for i in np.argsort(-local, kind="stable")[:10]]
        assert shipped_order == local_order, query
    assert len(set(text_key(build_texts))) == len(build_texts)  # no two texts share a key

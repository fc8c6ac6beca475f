"""Library-context features on hand-made rankings over the fixture vocabulary."""

from __future__ import annotations

import math

import numpy as np
import pytest

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.candidates import Retrieval, build_candidates
from phenoforge.setbuild.context import (
    CONTEXT_FEATURES,
    LibraryContext,
    name_signature,
    signature_of,
    with_context_features,
)
from phenoforge.setbuild.corpus import Example

HF = Retrieval(
    query="heart failure",
    bm25=[("I50.9", 5.0), ("I48.0", 1.0)],
    dense=[("I50.21", 0.9), ("I48", 0.8), ("I50", 0.7), ("I48.0", 0.6), ("J45.909", 0.1)],
)
AF = Retrieval(
    query="atrial fibrillation",
    bm25=[("I48.0", 4.0)],
    dense=[("I48.0", 0.95), ("I50.21", 0.5), ("I48", 0.4), ("J45.909", 0.2)],
)
ASTHMA = Retrieval(query="asthma", bm25=[("J45.909", 3.0)], dense=[("J45.909", 0.9), ("I50.9", 0.3)])


def _column(name: str) -> int:
    return CONTEXT_FEATURES.index(name)


def _rows(hierarchy: Hierarchy, retrieval: Retrieval, context: LibraryContext) -> dict[str, np.ndarray]:
    table = build_candidates(hierarchy, retrieval)
    features = context.features(table)
    assert features.shape == (len(table), len(CONTEXT_FEATURES))
    return {hierarchy.code[node]: features[i] for i, node in enumerate(table.ids)}


def test_margins_compare_a_code_with_the_best_other_name(hierarchy: Hierarchy) -> None:
    tables = [build_candidates(hierarchy, r) for r in (HF, AF, ASTHMA)]
    context = LibraryContext(hierarchy, [signature_of(t) for t in tables])
    row = _rows(hierarchy, HF, context)
    # I50.21: 0.9 for heart failure; atrial fibrillation 0.5, asthma its floor 0.3
    assert row["I50.21"][_column("ctx_cos_margin")] == pytest.approx(0.9 - 0.5)
    assert row["I50.21"][_column("ctx_n_closer")] == pytest.approx(0.0)
    # I48.0: 0.6 here, 0.95 for atrial fibrillation (closer), asthma's floor 0.3 (not closer)
    assert row["I48.0"][_column("ctx_cos_margin")] == pytest.approx(0.6 - 0.95)
    assert row["I48.0"][_column("ctx_n_closer")] == pytest.approx(math.log1p(1))
    # I50.9 is in no dense ranking but asthma's: heart failure's floor 0.1 against asthma's 0.3
    assert row["I50.9"][_column("ctx_cos_margin")] == pytest.approx(0.1 - 0.3)
    # categories: I50's best member here is I50.21 (0.9); atrial fibrillation reaches I50.21 at 0.5,
    # asthma reaches I50.9 at 0.3
    assert row["I50.9"][_column("ctx_cat_margin")] == pytest.approx(0.9 - 0.5)
    # I48: heart failure's best is the category itself (0.8), atrial fibrillation's I48.0 (0.95)
    assert row["I48.0"][_column("ctx_cat_margin")] == pytest.approx(0.8 - 0.95)
    # words on the code's path: "heart failure" names I50 codes, "atrial fibrillation" the I48 ones (whose
    # block, "Other forms of heart disease", holds "heart": half of this name's words)
    assert row["I50.9"][_column("ctx_lex_margin")] == pytest.approx(1.0)
    assert row["I48.0"][_column("ctx_lex_margin")] == pytest.approx(0.5 - 1.0)


def test_a_name_alone_has_no_context_and_says_so(hierarchy: Hierarchy) -> None:
    table = build_candidates(hierarchy, HF)
    alone = LibraryContext(hierarchy, [signature_of(table)])
    assert not alone.applies_to("heart failure")
    with pytest.raises(ValueError, match="no library context"):
        alone.features(table)
    # the same name twice is still one name
    twice = LibraryContext(hierarchy, [signature_of(table), signature_of(build_candidates(hierarchy, HF))])
    assert len(twice) == 1 and not twice.applies_to("heart failure")
    # a name that is not among the context's names
    pair = LibraryContext(hierarchy, [signature_of(table), signature_of(build_candidates(hierarchy, AF))])
    assert pair.applies_to("heart failure") and not pair.applies_to("asthma")


def test_a_signature_from_the_rankings_equals_the_tables(hierarchy: Hierarchy) -> None:
    """The benchmark makes a name's signature from its ranking before its table exists: the same values."""
    for retrieval in (HF, AF, ASTHMA, Retrieval(query="nothing dense", bm25=[("I50.9", 1.0)])):
        table = build_candidates(hierarchy, retrieval)
        direct = name_signature(hierarchy, retrieval.query, retrieval.searched_as, retrieval.dense)
        from_table = signature_of(table)
        assert direct.query == from_table.query and direct.tokens == from_table.tokens
        assert direct.floor == from_table.floor
        assert np.array_equal(direct.dense_ids, from_table.dense_ids)
        assert np.array_equal(direct.dense_scores, from_table.dense_scores)


def test_with_context_features_leaves_out_single_name_libraries(
    hierarchy: Hierarchy, train_examples: list[Example], other_examples: list[Example]
) -> None:
    lonely = [ex for ex in other_examples[:1]]
    out = with_context_features(hierarchy, [*train_examples, *lonely])
    assert [ex.key for ex in out] == [ex.key for ex in train_examples]
    for before, after in zip(train_examples, out, strict=True):
        width = before.features.shape[1]
        assert after.features.shape == (len(before.table), width + len(CONTEXT_FEATURES))
        assert np.array_equal(after.features[:, :width], before.features)
    # the context is the example's own library: the same rows as a context made of its names alone
    names = LibraryContext(hierarchy, [signature_of(ex.table) for ex in train_examples])
    first = next(ex for ex in out if len(ex.table))
    source = next(ex for ex in train_examples if ex.key == first.key)
    assert np.array_equal(first.features[:, -len(CONTEXT_FEATURES) :], names.features(source.table))


def test_word_shares_equal_the_definition_on_every_fixture_cohort(
    hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    """The bit-set word shares against a plain reading of the definition: the name's words found in the
    names of the code and of every ancestor."""
    from phenoforge.engine.query import tokenize

    context = LibraryContext(hierarchy, [signature_of(ex.table) for ex in train_examples])

    def share(tokens: tuple[str, ...], node: int) -> float:
        path = {w for n in hierarchy.chain(node) for w in tokenize(hierarchy.name.get(n, ""))}
        wanted = set(tokens)
        return len(wanted & path) / len(wanted) if wanted else 0.0

    checked = 0
    for ex in train_examples:
        if not len(ex.table):
            continue
        own = set(ex.table.query_tokens)
        others = [s for s in context.signatures if s.query != ex.table.query]
        got = context.features(ex.table)[:, _column("ctx_lex_margin")]
        for i, node in enumerate(ex.table.ids):
            expected = share(tuple(own), node) - max(share(s.tokens, node) for s in others)
            assert got[i] == pytest.approx(expected), (ex.key, hierarchy.code[node])
            checked += 1
    assert checked > 40


def _all_pairs_features(context: LibraryContext, table) -> np.ndarray:  # noqa: ANN001
    """The context features as first written: every other name's value side by side (the definition the
    per-margin computation must equal bit for bit)."""
    out = np.zeros((len(table), len(CONTEXT_FEATURES)), dtype=np.float64)
    if not len(table):
        return out
    own = context.index[table.query]
    others = np.array([i for i in range(len(context.signatures)) if i != own], dtype=np.int64)
    nodes = context._nodes
    rows = nodes.rows(np.asarray(table.ids, dtype=np.int64))
    nodes.fill(rows)
    # the names x nodes cosine matrix as it was first built: floors, then each name's ranking assigned
    dense = np.repeat(context._floor[:, None], len(nodes.ids), axis=1)
    for i, signature in enumerate(context.signatures):
        if len(signature.dense_ids):
            dense[i, nodes.rows(signature.dense_ids)] = signature.dense_scores
    cosine = dense[:, rows]
    own_cos, other_cos = cosine[own], cosine[others]
    own_category = nodes.own_category[rows]
    columns = np.where(own_category >= 0, context._category_column[own_category], -1)
    category = context._category_best[:, columns]
    context._path_shares(rows, own)  # fills the bits of rows the node table gained
    chains = nodes.chain[rows]
    valid = chains >= 0
    path = np.bitwise_or.reduce(np.where(valid[..., None], context._bits[np.where(valid, chains, 0)], 0), axis=1)
    held = np.bitwise_count(path[:, None, :] & context._masks[None, :, :]).sum(axis=-1)
    shares = np.where(context._has_words, held / context._lengths, 0.0)
    out[:, 0] = own_cos - other_cos.max(axis=0)
    out[:, 1] = np.log1p((other_cos > own_cos).sum(axis=0))
    out[:, 2] = category[own] - category[others].max(axis=0)
    out[:, 3] = shares[:, own] - shares[:, others].max(axis=1)
    return out


def test_the_features_equal_the_all_pairs_definition_bit_for_bit(
    hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    """Computed per margin (the others' maxima, word shares through the names holding each word), as a
    1,918-name library needs; every value equals the all-pairs computation exactly, own name first, last
    or in between."""
    context = LibraryContext(hierarchy, [signature_of(ex.table) for ex in train_examples])
    tables = [ex.table for ex in train_examples if len(ex.table)]
    positions = {context.index[t.query] for t in tables}
    assert len(tables) > 5 and {0, len(context) - 1} <= positions, positions
    for table in tables:
        got, expected = context.features(table), _all_pairs_features(context, table)
        assert np.array_equal(got, expected), table.query
    small = LibraryContext(hierarchy, [signature_of(build_candidates(hierarchy, r)) for r in (HF, AF)])
    for retrieval in (HF, AF):
        table = build_candidates(hierarchy, retrieval)
        assert np.array_equal(small.features(table), _all_pairs_features(small, table))


def test_a_node_reached_twice_keeps_its_last_cosine_as_the_matrix_did(hierarchy: Hierarchy) -> None:
    from phenoforge.setbuild.context import NameSignature

    ids = [hierarchy.resolve(code) for code in ("I50.21", "I48", "I50.21")]
    twice = NameSignature(
        query="heart failure",
        tokens=("heart", "failure"),
        dense_ids=np.array(ids),
        dense_scores=np.array([0.9, 0.5, 0.2]),
        floor=0.1,
    )
    other = signature_of(build_candidates(hierarchy, AF))
    context = LibraryContext(hierarchy, [twice, other])
    rows = context._nodes.rows(np.array(ids[:2]))
    block = context._cosines(rows)
    assert block[0].tolist() == pytest.approx([0.2, 0.5])  # the last of I50.21's two cosines
    table = build_candidates(hierarchy, HF)
    assert np.array_equal(context.features(table), _all_pairs_features(context, table))

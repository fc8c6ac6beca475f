"""BM25: agrees with rank-bm25's BM25Okapi, searches the notes, and refuses bad queries politely."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from phenoforge.engine.bm25 import BM25Index, bm25_search, document_texts, get_bm25_index, top_n
from phenoforge.engine.query import MAX_QUERY_CHARS, fold, query_problem, tokenize
from phenoforge.engine.schema import RETRIEVABLE_KINDS
from tests.fixture_vocab import FIXTURE_NODES

KIND = {code: kind for code, _name, kind, _parents in FIXTURE_NODES}

BAD_QUERIES = [
    pytest.param("", id="empty"),
    pytest.param("   \t\n ", id="whitespace"),
    pytest.param("heart failure " * 715, id="10000-chars"),
    pytest.param("x" * 10_000, id="10000-x"),
    pytest.param("糖尿病", id="non-ascii-only"),
    pytest.param("'; DROP TABLE concept; --", id="sql-drop"),
    pytest.param("SELECT * FROM concept WHERE 1=1", id="sql-select"),
    pytest.param("' OR '1'='1", id="sql-or"),
    pytest.param(None, id="none"),
    pytest.param("of the and with", id="stopwords-only"),
    pytest.param("!!! ??? ...", id="punctuation-only"),
]

SAMPLE_QUERIES = [
    "heart failure",
    "type 2 diabetes mellitus with kidney complications",
    "asthma",
    "chronic obstructive pulmonary disease",
    "atrial fibrillation",
    "obesity",
    "essential hypertension",
    "major depressive disorder recurrent",
    "fracture of neck of femur",
    "rheumatoid arthritis",
    "sepsis",
    "acute myocardial infarction",
    "alcohol dependence",
    "chronic kidney disease stage 3",
    "pneumonia",
    "hypothyroidism",
    "migraine without aura",
    "schizophrenia",
    "malignant neoplasm of lung",
    "osteoporosis with pathological fracture",
    "Kimmelstiel-Wilson",
    "HIV disease",
]


# --- fixture vocabulary ---------------------------------------------------------------------------


def test_inclusion_terms_are_searchable(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = bm25_search(fixture_con, "Kimmelstiel-Wilson")
    assert result.reason is None
    assert result.codes[0] == "E11.21"
    assert result.codes == ["E11.21"]


def test_includes_notes_are_searchable(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert bm25_search(fixture_con, "congestive heart disease").codes[0] == "I50"
    assert bm25_search(fixture_con, "allergic").codes == ["J45"]


def test_excludes_notes_are_not_searchable(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """'gestational' only appears in an excludes1 note of E11, which names another condition."""
    result = bm25_search(fixture_con, "gestational")
    assert result.hits == []
    assert result.reason


def test_document_texts_cover_retrievable_kinds_only(fixture_con: duckdb.DuckDBPyConnection) -> None:
    docs = document_texts(fixture_con)
    codes = [code for code, _name, _text in docs]
    assert codes == [code for code, *_ in FIXTURE_NODES if KIND[code] in RETRIEVABLE_KINDS]
    texts = dict((code, text) for code, _name, text in docs)
    assert "Kimmelstiel-Wilson" in texts["E11.21"]
    assert "gestational" not in texts["E11"]


@pytest.mark.parametrize(
    "query", ["diabetes mellitus", "diseases", "circulatory system", "injuries hip thigh", "respiratory", "heart"]
)
def test_only_retrievable_kinds_are_returned(fixture_con: duckdb.DuckDBPyConnection, query: str) -> None:
    result = bm25_search(fixture_con, query, k=100)
    for hit in result.hits:
        assert KIND[hit.code] in RETRIEVABLE_KINDS, hit.code
    assert "E08-E13" not in result.codes and "4" not in result.codes


def test_hits_are_ranked_with_provenance(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = bm25_search(fixture_con, "type 2 diabetes kidney", k=5)
    assert result.method == "bm25" and len(result.hits) == 5
    assert [hit.rank for hit in result.hits] == [1, 2, 3, 4, 5]
    scores = [hit.score for hit in result.hits]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    for hit in result.hits:
        assert [(p.retriever, p.query, p.rank, p.score) for p in hit.provenance] == [
            ("bm25", "type 2 diabetes kidney", hit.rank, hit.score)
        ]
    assert result.hits[0].name.startswith("Type 2 diabetes")


@pytest.mark.parametrize("query", ["diabetes", "heart failure", "asthma", "fracture femur", "type 2 diabetes mellitus"])
def test_deeper_ranking_never_reorders_a_shallower_one(fixture_con: duckdb.DuckDBPyConnection, query: str) -> None:
    index = get_bm25_index(fixture_con)
    full = index.ranking(query, len(index))
    assert full
    for n in range(1, len(full) + 2):
        assert index.ranking(query, n) == full[:n]


def test_top_n_prefix_property_with_ties() -> None:
    rng = np.random.default_rng(7)
    codes = [f"C{i}" for i in range(60)]
    for _ in range(50):
        scores = rng.integers(0, 4, size=60).astype(float)  # many ties, some zeros
        full = top_n(scores, codes, 60)
        assert all(score > 0 for _c, score in full)
        assert len(full) == int((scores > 0).sum())
        for n in range(0, 62):
            assert top_n(scores, codes, n) == full[:n]
        # ties broken by vocabulary order
        for (c1, s1), (c2, s2) in zip(full, full[1:], strict=False):
            assert s1 > s2 or (s1 == s2 and codes.index(c1) < codes.index(c2))


@pytest.mark.parametrize("query", BAD_QUERIES)
def test_bad_queries_give_an_empty_result_with_a_reason(fixture_con: duckdb.DuckDBPyConnection, query: object) -> None:
    result = bm25_search(fixture_con, query)  # type: ignore[arg-type]
    assert result.hits == []
    assert result.method == "bm25"
    assert isinstance(result.reason, str) and len(result.reason) > 10
    assert len(result.query) <= 200
    assert get_bm25_index(fixture_con).ranking(query, 10) == []  # type: ignore[arg-type]
    assert fixture_con.execute("SELECT count(*) FROM concept").fetchall()[0][0] == len(FIXTURE_NODES)


def test_specific_reasons(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert "empty" in bm25_search(fixture_con, "  ").reason
    assert f"{MAX_QUERY_CHARS}" in bm25_search(fixture_con, "a" * 10_000).reason
    assert "SQL" in bm25_search(fixture_con, "'; DROP TABLE concept; --").reason
    assert "English" in bm25_search(fixture_con, "糖尿病").reason
    assert "text" in bm25_search(fixture_con, None).reason  # type: ignore[arg-type]


def test_words_not_in_the_vocabulary_say_so(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = bm25_search(fixture_con, "zzyzx quux")
    assert result.hits == [] and "no ICD-10-CM description" in result.reason


def test_k_is_respected(fixture_con: duckdb.DuckDBPyConnection) -> None:
    for k in (1, 3, 7):
        assert len(bm25_search(fixture_con, "diabetes", k=k).hits) == k


def test_index_is_cached_per_build(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert get_bm25_index(fixture_con) is get_bm25_index(fixture_con)
    assert isinstance(get_bm25_index(fixture_con), BM25Index)


@pytest.mark.parametrize(
    "query",
    [
        "foot drop from peroneal nerve palsy",
        "wrist drop from radial nerve injury",
        "delayed union of fracture from a fall",
    ],
)
def test_clinical_phrases_are_not_mistaken_for_sql(query: str) -> None:
    assert query_problem(query) is None


def test_tokenize_and_fold() -> None:
    assert fold("Sézary") == "sezary"
    assert tokenize("Sézary disease") == tokenize("Sezary DISEASE") == ["sezary", "disease"]
    assert tokenize("Type 2 diabetes mellitus without complications") == [
        "type",
        "2",
        "diabetes",
        "mellitus",
        "complications",
    ]
    assert tokenize("Kimmelstiel-Wilson") == ["kimmelstiel", "wilson"]


# --- the real vocabulary ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def okapi(real_con: duckdb.DuckDBPyConnection) -> tuple[BM25Okapi, list[str]]:
    docs = document_texts(real_con)
    return BM25Okapi([tokenize(text) or ["_empty_"] for _c, _n, text in docs], k1=1.5, b=0.75), [c for c, *_ in docs]


def _okapi_top(okapi: tuple[BM25Okapi, list[str]], query: str, n: int) -> list[str]:
    model, codes = okapi
    scores = model.get_scores(tokenize(query))
    order = np.lexsort((np.arange(len(scores)), -scores))[:n]
    return [codes[i] for i in order if scores[i] > 0]


def test_ranking_agrees_with_rank_bm25(real_con: duckdb.DuckDBPyConnection, okapi) -> None:  # noqa: ANN001
    index = get_bm25_index(real_con)
    overlaps = []
    for query in SAMPLE_QUERIES:
        ours = [code for code, _ in index.ranking(query, 10)]
        theirs = _okapi_top(okapi, query, 10)
        assert ours and theirs, query
        overlaps.append(len(set(ours) & set(theirs)) / len(theirs))
    mean = float(np.mean(overlaps))
    print(f"mean top-10 overlap with rank-bm25 BM25Okapi over {len(SAMPLE_QUERIES)} queries: {mean:.3f}")
    assert mean >= 0.9
    assert min(overlaps) >= 0.5


def test_real_index_covers_every_retrievable_code(real_con: duckdb.DuckDBPyConnection) -> None:
    index = get_bm25_index(real_con)
    assert len(index) == 98_466 - 22 - 258


def test_accent_folding_on_the_real_vocabulary(real_con: duckdb.DuckDBPyConnection) -> None:
    plain = bm25_search(real_con, "Sezary disease", k=10)
    accented = bm25_search(real_con, "Sézary disease", k=10)
    assert plain.codes == accented.codes
    assert plain.codes and all(code.startswith("C84.1") for code in plain.codes)


def test_real_inclusion_term(real_con: duckdb.DuckDBPyConnection) -> None:
    assert "E11.21" in bm25_search(real_con, "Kimmelstiel-Wilson disease", k=10).codes


def test_real_results_are_retrievable_kinds(real_con: duckdb.DuckDBPyConnection) -> None:
    rows = dict(real_con.execute("SELECT code, kind FROM concept").fetchall())
    for query in ("diseases of the circulatory system", "diabetes mellitus", "injuries to the hip and thigh"):
        for code in bm25_search(real_con, query, k=50).codes:
            assert rows[code] in RETRIEVABLE_KINDS, (query, code)


def test_rankings_equal_ranking_per_query(fixture_con: duckdb.DuckDBPyConnection) -> None:
    index = get_bm25_index(fixture_con)
    queries = ["heart failure", "type 2 diabetes", "", "heart failure", "SELECT * FROM x", "zzzz", "asthma"]
    batched = index.rankings(queries, 7)
    assert batched == [index.ranking(query, 7) for query in queries]
    assert batched[0] and batched[2] == [] and batched[5] == []
    assert index.rankings([], 7) == [] and index.rankings(["asthma"], 0) == [[]]


def test_tokens_are_shared_strings() -> None:
    """The set builders cache the words of every vocabulary text: one string per distinct word."""
    first, second = tokenize("Chronic kidney disease"), tokenize("kidney stones, chronic")
    assert first == ["chronic", "kidney", "disease"] and second == ["kidney", "stones", "chronic"]
    assert first[0] is second[2] and first[1] is second[0]

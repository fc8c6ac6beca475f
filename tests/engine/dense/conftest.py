"""The distinct-text layout's fixture: a small composed vocabulary (10 stems x 3 suffixes, two stems
with synonyms) and a dense index built on it with the fake embedder, shared by the layout tests and
their hostile counterparts."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.dense import DenseRetriever, ensure_dense_index
from phenoforge.engine.dense import retriever as dense_retriever
from phenoforge.engine.dense import texts as dense_texts
from tests.engine.fake_embedder import FakeEmbedder

SITES = ["femur", "tibia", "fibula", "patella", "radius", "ulna", "humerus", "clavicle", "scapula", "pelvis"]
SUFFIXES = ["initial encounter", "subsequent encounter", "sequela"]
SYNONYM_SITES = {"patella": "kneecap fracture", "pelvis": "broken pelvic ring"}
"""Stems whose code carries an inclusion term: their name is no row's text, so the layout stores
them as extra stems (and an upgrade embeds them)."""
QUERIES = ["fracture of femur sequela", "kneecap fracture", "broken pelvis initial encounter", "asthma", "ulna"]


def build_vocabulary(path: Path) -> Path:
    """10 stems x 3 suffixes (6 composed codes per suffix with 4 training samples), two stems with
    synonyms, and two plain codes sharing one text."""
    from phenoforge.engine.codes import code_key
    from phenoforge.engine.schema import ICD10CM
    from phenoforge.engine.vocab_build import VocabularyRows, write_vocabulary

    rows = VocabularyRows(metadata={"source": "fixture", "vocabulary_release": "distinct layout test"})
    rows.concepts.append((1, ICD10CM, "S", "S", "Injuries", "chapter", False, None, None, None))
    for concept_id, code in ((2, "J45"), (3, "J46")):
        rows.concepts.append((concept_id, ICD10CM, code, code_key(code), "Asthma", "category", True, None, None, None))
        rows.parents.append((concept_id, 1))
    next_id = 4
    for index, site in enumerate(SITES):
        stem_code, stem_id = f"S{index:02d}.00", next_id
        name = f"Fracture of {site}"
        rows.concepts.append(
            (stem_id, ICD10CM, stem_code, code_key(stem_code), name, "subcategory", False, None, None, None)
        )
        rows.parents.append((stem_id, 1))
        if site in SYNONYM_SITES:
            rows.notes.append((stem_id, "inclusion_term", SYNONYM_SITES[site]))
        next_id += 1
        for letter, suffix in zip("ADS", SUFFIXES, strict=True):
            code = f"{stem_code}X{letter}"
            rows.concepts.append(
                (next_id, ICD10CM, code, code_key(code), f"{name}, {suffix}", "extension", True, None, None, None)
            )
            rows.parents.append((next_id, stem_id))
            next_id += 1
    return write_vocabulary(path, rows)


@pytest.fixture
def con(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.setattr(dense_texts, "OFFSET_SAMPLES", 4)
    connection = duckdb.connect(str(build_vocabulary(tmp_path / "v.duckdb")), read_only=True)
    yield connection
    connection.close()


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "dense"


@pytest.fixture
def built(con: duckdb.DuckDBPyConnection, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> DenseRetriever:
    monkeypatch.setattr(dense_retriever, "COARSE_CANDIDATES", 10)
    return ensure_dense_index(con, FakeEmbedder(), index_dir)

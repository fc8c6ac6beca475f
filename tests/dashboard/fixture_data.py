"""A complete dashboard data directory on fixture data: vocabulary, one library, dense index.

Shared by the AppTest suite, the browser test and the dashboard bench. The cohort ids are OHDSI
Phenotype Library ids the decomposition test cases use, so the Decomposition page has cases.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from phenoforge.engine.curated import (
    Citation,
)
from tests.fixture_library import write_icd_library
from tests.fixture_vocab import build_fixture_vocab

EMBEDDER_SPEC = "tests.engine.fake_embedder:FakeEmbedder"
LIBRARY_DIR = "ohdsi"
LIBRARY_ID = "ohdsi-fixture"

FIXTURE_COHORTS: dict[str, tuple[str, list[str]]] = {
    "503": ("Type 2 diabetes mellitus", ["E11.21", "E11.22", "E11.29", "E11.65", "E11.9"]),
    "499": ("Type 1 diabetes mellitus", ["E10.9", "E10.10"]),
    "519": ("Heart failure", ["I50.21", "I50.22", "I50.9"]),
    "513": ("Atrial fibrillation", ["I48.0", "I48.91"]),
    "521": ("Asthma", ["J45.20", "J45.909"]),
    "563": ("Obesity", ["E66.0", "E66.9"]),
}


def write_fixture_library(root: Path) -> Path:
    return write_icd_library(
        root / LIBRARY_DIR,
        {cid: (name, codes, False) for cid, (name, codes) in FIXTURE_COHORTS.items()},
        LIBRARY_ID,
        name="Fixture phenotypes",
        description="A few cohorts over the fixture vocabulary",
        citation=Citation(source="phenoforge tests", version="1", licence="CC0", url="https://example.org/fixture"),
    )


@contextmanager
def env(**values: str) -> Iterator[None]:
    old = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def build_dashboard_data(data_dir: Path, dense: bool = True, fitted: bool = True) -> Path:
    """Vocabulary, fixture library, (optionally) a fake-embedder dense index, and (optionally) the set builders
    fitted as the first-run build fits them (pages never fit: without it they offer no set builder)."""
    import duckdb

    from phenoforge.engine.dense import ensure_dense_index
    from tests.engine.fake_embedder import FakeEmbedder

    data_dir.mkdir(parents=True, exist_ok=True)
    build_fixture_vocab(data_dir / "vocab.duckdb")
    write_fixture_library(data_dir / "libraries")
    if dense:
        con = duckdb.connect(str(data_dir / "vocab.duckdb"), read_only=True)
        try:
            ensure_dense_index(con, embed_fn=FakeEmbedder(), index_dir=data_dir / "dense")
        finally:
            con.close()
    if fitted:
        fit_set_builders(data_dir)
    return data_dir


def fit_set_builders(data_dir: Path) -> None:
    """Fit every set builder the installed libraries need (what Home's first-run build does), with the dense
    index when there is one: after a library is added, before a page offers the set builders for it."""
    import duckdb

    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.methods.set_building import fit_for_installed_libraries
    from tests.engine.fake_embedder import FakeEmbedder

    with env(PHENOFORGE_DATA_DIR=str(data_dir)):
        con = duckdb.connect(str(data_dir / "vocab.duckdb"), read_only=True)
        try:
            dense = load_dense_if_ready(con, index_dir=data_dir / "dense", embed_fn=FakeEmbedder())
            fit_for_installed_libraries(con, dense)
        finally:
            con.close()


def dashboard_env(data_dir: Path) -> dict[str, str]:
    """The environment the app needs to run on this data without a model or a network."""
    return {
        "PHENOFORGE_DATA_DIR": str(data_dir),
        "PHENOFORGE_EMBEDDER": EMBEDDER_SPEC,
        "PHENOFORGE_DENSE_AUTOBUILD": "0",
        "ANTHROPIC_API_KEY": "",
    }

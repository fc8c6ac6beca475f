"""The shared resources: cursor pool, background dense build, embedder injection."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from phenoforge.dashboard import resources
from phenoforge.dashboard.resources import CursorPool, DenseManager
from phenoforge.errors import PhenoforgeError
from tests.dashboard.fixture_data import EMBEDDER_SPEC
from tests.fixture_vocab import build_fixture_vocab


@pytest.fixture
def pool(tmp_path: Path) -> CursorPool:
    path = build_fixture_vocab(tmp_path / "vocab.duckdb")
    return CursorPool(duckdb.connect(str(path), read_only=True))


def test_cursors_are_reused_and_never_shared(pool: CursorPool) -> None:
    held: list[object] = []
    barrier = threading.Barrier(3)

    def borrow() -> None:
        with pool.cursor() as cur:
            held.append(cur)
            assert cur.execute("SELECT count(*) FROM concept").fetchall()[0][0] == 48
            barrier.wait(timeout=10)

    threads = [threading.Thread(target=borrow) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(c) for c in held}) == 3  # three at once: three cursors
    with pool.cursor():
        pass
    assert pool.created == 3  # afterwards: reused


def test_background_build_once_then_ready(pool: CursorPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(resources.EMBEDDER_ENV, EMBEDDER_SPEC)
    manager = DenseManager(pool, index_dir=tmp_path / "dense")
    assert manager.status().state == "missing"
    assert manager.retriever() is None
    assert manager.start_build() is True
    assert manager.start_build() is False  # one build at a time (or already done)
    state = manager.wait(timeout=60)
    assert state.state == "ready"
    retriever = manager.retriever()
    assert retriever is not None
    assert retriever.search("heart failure", k=3).hits
    assert manager.start_build() is False


def test_index_built_elsewhere_is_noticed(pool: CursorPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from phenoforge.engine.dense import ensure_dense_index
    from tests.engine.fake_embedder import FakeEmbedder

    monkeypatch.setenv(resources.EMBEDDER_ENV, EMBEDDER_SPEC)
    monkeypatch.setattr(resources, "RECHECK_SECONDS", 0.0)
    manager = DenseManager(pool, index_dir=tmp_path / "dense")
    assert manager.retriever() is None
    ensure_dense_index(pool.con.cursor(), embed_fn=FakeEmbedder(), index_dir=tmp_path / "dense")
    assert manager.retriever() is not None
    assert manager.status().state == "ready"


def test_bad_embedder_spec_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(resources.EMBEDDER_ENV, "no.such.module:thing")
    with pytest.raises(PhenoforgeError, match="unset it to use the real model"):
        resources.make_embed_fn()


def test_claude_key_is_reported_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-real")
    assert resources.claude_key_set() is True
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")
    monkeypatch.setattr("phenoforge.agent.claude._secrets_paths", lambda: [])
    assert resources.claude_key_set() is False

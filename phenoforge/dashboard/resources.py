"""Process-wide resources the dashboard shares between browser sessions.

One read-only DuckDB connection per process, handed out as per-thread cursors from a pool (a
DuckDB cursor must not be used by two threads at once, and Streamlit runs every session's script
in its own thread). The dense index builds in a background thread so BM25 stays usable while it
runs, and every session can poll its progress.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel

from phenoforge.config import dense_index_dir, vocab_db_path
from phenoforge.engine import dense as dense_module
from phenoforge.errors import PhenoforgeError, VocabularyError

EMBEDDER_ENV = "PHENOFORGE_EMBEDDER"
"""``module:factory`` naming a zero-argument function that returns the embedding function the
dense index uses; tests point it at a deterministic fake so no model is ever loaded."""

DENSE_AUTOBUILD_ENV = "PHENOFORGE_DENSE_AUTOBUILD"
"""Set to ``0`` to stop the dashboard starting the dense build on its own."""


class CursorPool:
    """Cursors of one read-only connection, lent to one thread at a time.

    Cursors are reused rather than made per script run, because module-level caches that key on
    the connection object would otherwise keep every cursor ever made alive.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self._free: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()
        self.created = 0

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._lock:
            if self._free:
                cur = self._free.pop()
            else:
                cur = self.con.cursor()
                self.created += 1
        try:
            yield cur
        finally:
            with self._lock:
                self._free.append(cur)


def vocabulary_present(path: Path | None = None) -> bool:
    return (Path(path) if path is not None else vocab_db_path()).exists()


def open_vocabulary(path: Path | None = None) -> duckdb.DuckDBPyConnection:
    """The vocabulary read-only, never building it (the Home page builds it with a progress bar)."""
    from phenoforge.engine.db import connect

    path = Path(path) if path is not None else vocab_db_path()
    if not path.exists():
        raise VocabularyError(
            "no vocabulary database yet: open the Home page to build it, or run `python -m phenoforge build`"
        )
    return connect(path, build=False)


def build_vocabulary(progress: Callable[[int, int, str], None] | None = None) -> Path:
    """Build (or keep) the embedded default vocabulary at the configured path."""
    from phenoforge.engine.db import ensure_vocabulary

    if progress is None:
        return ensure_vocabulary()
    return ensure_vocabulary(progress=progress)


def embedder_factory() -> Callable[[], Any] | None:
    """The embedder factory named by ``PHENOFORGE_EMBEDDER``, or None for the real model."""
    spec = os.environ.get(EMBEDDER_ENV, "").strip()
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr or "embed_fn")
    except (ImportError, AttributeError) as error:
        raise PhenoforgeError(
            f"{EMBEDDER_ENV}={spec!r} does not name an importable factory ({error}); unset it to use the real model"
        ) from error
    return factory


def make_embed_fn() -> Any:
    """The embedding function: the injected fake when configured, else the real default model."""
    factory = embedder_factory()
    if factory is not None:
        return factory()
    from phenoforge.engine.dense import default_embed_fn

    return default_embed_fn()


def dense_autobuild_enabled() -> bool:
    return os.environ.get(DENSE_AUTOBUILD_ENV, "1").strip() not in {"0", "false", "no"}


RECHECK_SECONDS = 5.0
"""How often a missing index is looked for again (another process may have built it)."""


def _ready_state(retriever: object) -> DenseState:
    """A ready index's state: its status line (codes, build, how it was embedded) and its precision note."""
    status = getattr(retriever, "status", None)
    if status is None or not hasattr(status, "precision_note"):
        return DenseState(state="ready", message="dense index ready")
    return DenseState(state="ready", message=status.message(), note=status.precision_note())


class DenseState(BaseModel):
    """What a page needs to say about the dense index right now."""

    state: str  # "ready" | "building" | "missing" | "corrupt" | "stale" | "failed"
    done: int = 0
    total: int = 0
    message: str = ""
    error: str | None = None
    seconds: float = 0.0
    note: str | None = None
    """For a ready index embedded otherwise than the default (bf16, int8): what it is and how to rebuild it."""

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0


class DenseManager:
    """Loads the dense retriever when its index is ready; builds it in a thread when asked.

    One per process (the page layer keeps it in ``st.cache_resource``); every method is
    thread-safe so several sessions can poll and start it at once, and only one build runs.
    """

    def __init__(self, pool: CursorPool, index_dir: Path | None = None) -> None:
        self.pool = pool
        self.index_dir = Path(index_dir) if index_dir is not None else dense_index_dir()
        self._lock = threading.Lock()
        self._retriever: Any = None
        self._thread: threading.Thread | None = None
        self._state = DenseState(state="missing")
        self._started = 0.0
        self._checked_at: float | None = None

    def retriever(self) -> Any:
        """The ready retriever, or None while missing or building (callers degrade to BM25)."""
        with self._lock:
            if self._retriever is not None:
                return self._retriever
            if self._thread is not None and self._thread.is_alive():
                return None
            now = time.monotonic()
            if self._checked_at is not None and now - self._checked_at < RECHECK_SECONDS:
                return None
            self._checked_at = now
        try:
            embed_fn = make_embed_fn() if embedder_factory() is not None else None
            # The retriever keeps its connection: a cursor of its own, never a pooled one.
            retriever = dense_module.load_dense_if_ready(
                self.pool.con.cursor(), index_dir=self.index_dir, embed_fn=embed_fn
            )
        except PhenoforgeError as error:
            with self._lock:
                self._state = DenseState(state="failed", error=str(error))
            return None
        unusable = None
        if retriever is None:  # say whether it is missing, stale or corrupt: "not built" would mislead
            unusable = dense_module.dense_index_status(self.pool.con.cursor(), index_dir=self.index_dir)
        with self._lock:
            if retriever is not None:
                self._retriever = retriever
                self._state = _ready_state(retriever)
            elif unusable is not None and self._state.state in ("missing", "corrupt", "stale"):
                self._state = (
                    DenseState(state="missing")
                    if unusable.state == "missing"
                    else DenseState(
                        state=unusable.state,
                        message=f"the dense index is {unusable.state} ({unusable.reason}); dense methods are "
                        "unavailable and hybrid runs as BM25 alone: rebuild it from the Home page or with "
                        "`python -m phenoforge build`",
                    )
                )
            return self._retriever

    def status(self) -> DenseState:
        self.retriever()
        with self._lock:
            state = self._state.model_copy()
        if state.state == "building":
            state.seconds = time.monotonic() - self._started
        return state

    def start_build(self) -> bool:
        """Start the background build unless the index is ready or a build is running."""
        if self.retriever() is not None:
            return False
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return False
            self._state = DenseState(
                state="building",
                message="loading the model (or waiting for another build of the index to finish)",
            )
            self._started = time.monotonic()
            self._thread = threading.Thread(target=self._build, name="phenoforge-dense-build", daemon=True)
            self._thread.start()
        return True

    def _progress(self, done: int, total: int, message: str) -> None:
        with self._lock:
            self._state = DenseState(state="building", done=done, total=total, message=message)

    def _build(self) -> None:
        try:
            embed_fn = make_embed_fn()
            # The build runs for minutes: its own cursor, not one borrowed from the pool.
            cur = self.pool.con.cursor()
            retriever = dense_module.ensure_dense_index(
                cur, embed_fn=embed_fn, index_dir=self.index_dir, progress=self._progress
            )
        except Exception as error:  # noqa: BLE001 - shown to the user, the thread must not die silently
            message = str(error) if isinstance(error, PhenoforgeError) else (f"{type(error).__name__}: {error}")
            with self._lock:
                self._state = DenseState(
                    state="failed",
                    error=f"the dense index build failed ({message}); BM25 methods still work. "
                    "Retry from the Home page or run `python -m phenoforge build`.",
                )
            return
        with self._lock:
            self._retriever = retriever
            self._state = _ready_state(retriever)

    def wait(self, timeout: float = 60.0) -> DenseState:
        """Block until a running build ends (tests and scripts; pages poll instead)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.status()


def claude_key_set() -> bool:
    """Whether an Anthropic key is configured, in the environment or secrets (never its value)."""
    from phenoforge.agent.claude import resolve_api_key  # imports the anthropic SDK: only when asked

    try:
        resolve_api_key()
    except PhenoforgeError:
        return False
    return True

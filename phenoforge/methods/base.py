"""What a method is: a named function from a cohort's query to a code list, declaring its needs.

A method receives a :class:`MethodContext` (the vocabulary, the shared retrieval cache, the
retrievers and parameters) and a :class:`CohortTask` (the cohort's id and display name, the query;
plus the one curated code the reference's ``expand_descendants`` baseline seeds from). It never
sees the curated set itself, so no method can peek at the answer it is scored on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import duckdb
from pydantic import BaseModel

from phenoforge.config import ProgressCallback
from phenoforge.engine.hybrid import fusion_depth
from phenoforge.eval.models import CopyHoldout
from phenoforge.eval.runs import RunEntry
from phenoforge.methods.retrieval import Retrieval

if TYPE_CHECKING:
    from phenoforge.engine.expansion import Hierarchy

Need = Literal["dense", "anthropic_key", "trained_model"]
KNOWN_NEEDS: tuple[str, ...] = ("dense", "anthropic_key", "trained_model")


class CohortTask(BaseModel):
    """What a method is given for one cohort."""

    cohort_id: str
    query: str
    seed_code: str | None = None
    """The least specific curated code: only the reference's weak ``expand_descendants`` baseline uses it."""


class SkipMethod(Exception):
    """Raised by a method's ``setup`` when it cannot run here; the reason goes into the report."""


T = TypeVar("T")


class RunState:
    """The state one run's methods share, one object per kind (a dataclass each method family owns).

    ``context.shared.get(SetBuildingRun)`` gives the set builders' run state, made on first use; a kind is
    a type, not a string key, so what is stored is typed and two families cannot collide on a name.
    """

    def __init__(self) -> None:
        self._kinds: dict[type, object] = {}

    def get(self, kind: type[T]) -> T:
        found = self._kinds.get(kind)
        if found is None:
            found = self._kinds[kind] = kind()
        return cast(T, found)

    def clear(self) -> None:
        self._kinds.clear()

    def end_chunk(self) -> None:
        """The harness answered and scored a chunk of the run's cohorts: each kind with an ``end_chunk``
        method drops what only that chunk's answers needed."""
        for state in list(self._kinds.values()):
            end = getattr(state, "end_chunk", None)
            if callable(end):
                end()


@dataclass
class MethodContext:
    """Everything a method may use, shared by every method of one benchmark run."""

    con: duckdb.DuckDBPyConnection
    hierarchy: Hierarchy
    retrieval: Retrieval
    k: int = 25
    dense_weight: float = 0.5
    library_id: str = ""
    library_group: str = ""
    library_path: str = ""
    """The scored library's directory (set builders compare its lists with the curated knowledge's)."""
    dense_problem: str | None = None
    """Why there is no dense retriever ('not built', 'corrupt: ...'), when there is none."""
    methods: tuple[str, ...] = ()
    """The names of every method this run will ask for, in order (empty: not known). Methods that
    share work (the set builders' candidate tables) compute it once for all of them."""
    queries: tuple[str, ...] = ()
    """Every query of the run, in cohort order, when the run answers its cohorts in several chunks (the
    harness scores a large library chunk by chunk): a method that batches work over the whole run (the
    set builders rank the typo-corrected forms in one call) can do it on the first chunk. Empty: only
    the tasks a call is given are known."""
    progress: ProgressCallback | None = None
    """Where long work inside a method (a fit, a batched pass) reports how far it is."""
    setups: dict[str, Any] = field(default_factory=dict)
    """Each method's ``MethodSetup.state``, by method name (what its ``setup`` prepared for its predictions)."""
    cohort_notes: dict[str, list[str]] = field(default_factory=dict)
    """Per method, what the report should say about single cohorts' answers (``note``)."""
    shared: RunState = field(default_factory=lambda: RunState())
    """What methods of this run share (candidate tables, fitted builders), one typed object per kind."""

    def note(self, method: str, cohort_id: str, text: str) -> None:
        """Record something the report should say about one cohort's answer (a fallback, an empty set)."""
        self.cohort_notes.setdefault(method, []).append(f"{cohort_id}: {text}")

    def notes_of(self, method: str) -> list[str]:
        """The per-cohort notes ``method`` recorded, taken (so the next run starts clean)."""
        return self.cohort_notes.pop(method, [])

    @property
    def dense(self) -> Any:
        return self.retrieval.dense

    @property
    def has_dense(self) -> bool:
        return self.retrieval.dense is not None

    @property
    def depth(self) -> int:
        return fusion_depth(self.k)


@dataclass
class MethodSetup:
    """What a method's ``setup`` found: training provenance and any degradation."""

    trained_on: list[str] = field(default_factory=list)
    degraded: str | None = None
    notes: list[str] = field(default_factory=list)
    state: Any = None
    fits: str = ""
    """which fit made the results (``shipped fit <signature>`` or ``local fit <signature>``), when fitted"""
    held_out: CopyHoldout | None = None
    """what the near-copy guard held out of what scores the library (the report's ``MethodRecord.held_out``)"""


Predict = Callable[[MethodContext, CohortTask], Sequence[RunEntry | str]]
PredictBatch = Callable[[MethodContext, Sequence[CohortTask]], Sequence[Sequence[RunEntry | str]]]
Setup = Callable[[MethodContext], MethodSetup]


@dataclass
class Method:
    """A registered method: its function, its label and what it needs to run."""

    name: str
    predict: Predict
    label: str = ""
    description: str = ""
    needs: frozenset[str] = frozenset()
    """Without these the method is skipped, with the reason."""
    uses: frozenset[str] = frozenset()
    """Without these the method still runs, and the report marks it degraded."""
    source: str = ""
    """'built-in' only for phenoforge's own registered methods (the registry sets it); a plug-in's loader
    sets its origin ('module:function', 'entry point: X'); a plug-in cannot claim 'built-in'."""
    setup: Setup | None = None
    retrieves: bool = True
    """Whether the method reads the shared rankings (the harness then ranks every query in one batch)."""
    depth: int | None = None
    """How deep a ranking the method reads (None: the run's fusion depth); the harness prefetches that deep."""
    predict_batch: PredictBatch | None = None
    """Optional: every cohort of a run in one call, one answer per task in order, the same answers as
    ``predict`` one task at a time. The harness prefers it; a method that costs per call (a model
    predicting each cohort's candidates) answers a run with one model call instead of hundreds."""

    @property
    def retrieves_dense(self) -> bool:
        return self.retrieves and ("dense" in self.needs | self.uses or self.source != "built-in")

    def unmet(self, context: MethodContext) -> str | None:
        """Why the method cannot run in ``context`` (None: it can)."""
        for need in sorted(self.needs):
            problem = _need_problem(need, context)
            if problem:
                return problem
        return None

    def degradation(self, context: MethodContext) -> str | None:
        problems = [p for p in (_need_problem(use, context) for use in sorted(self.uses)) if p]
        return "; ".join(problems) or None


def _need_problem(need: str, context: MethodContext) -> str | None:
    if need == "dense" and not context.has_dense:
        return f"no dense retriever ({context.dense_problem})" if context.dense_problem else "no dense retriever"
    if need == "anthropic_key":
        return None if os.environ.get("ANTHROPIC_API_KEY", "").strip() else "no Anthropic API key (ANTHROPIC_API_KEY)"
    return None


def entries(codes: Sequence[str], provenance: str, scores: Sequence[float] | None = None) -> list[RunEntry]:
    """Ranked run entries for plain codes, each with the same provenance line."""
    return [
        RunEntry(code=code, rank=rank, score=None if scores is None else scores[rank - 1], provenance=[provenance])
        for rank, code in enumerate(codes, start=1)
    ]

"""What the set builders of one benchmark run share: the prepared queries, the fit, the sets built."""

from __future__ import annotations

from dataclasses import dataclass, field

from phenoforge.eval.runs import RunEntry
from phenoforge.methods.base import MethodContext
from phenoforge.setbuild.api import (
    FittedBuilders,
)
from phenoforge.setbuild.candidates import (
    CandidateTable,
)
from phenoforge.setbuild.context import LibraryContext
from phenoforge.setbuild.learned import MembershipModel
from phenoforge.setbuild.models import BuiltCode, BuiltSet


@dataclass
class _Prepared:
    searched: str
    umbrellas: dict[str, str]
    bm25: list[tuple[str, float]]
    dense: list[tuple[str, float]] | None
    table: CandidateTable
    learned: BuiltSet | None = None
    """the learned set, built once per query for both ``learned`` and curated_transfer's fallback
    (its features are the costly part); whichever of the two runs first builds it"""


@dataclass
class SetBuildingRun:
    """What the set builders of one run share (``context.shared.get(SetBuildingRun)``)."""

    fitted: FittedBuilders | None = None
    """the builders fitted for the scored library, shared by every builder of the run"""
    prepared: dict[str, _Prepared] = field(default_factory=dict)
    """per query, its candidate table (kept only while a block is built, or for a query built on its own)"""
    searched: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    """per query, its typo-corrected form and umbrella nodes"""
    built: dict[str, dict[str, BuiltSet]] = field(default_factory=dict)
    """per builder, the sets the batched pass built that the builder has not asked for yet"""
    entries: dict[int, tuple[list[BuiltCode], list[RunEntry]]] = field(default_factory=dict)
    """the learned sets' run entries, by code list, for curated_transfer handing the same list over"""
    library_context: tuple[MembershipModel | None, tuple[str, ...], LibraryContext | None] | None = None
    """the context model, the names and the library context made for them (made once per run)"""
    failed: dict[str, Exception] = field(default_factory=dict)
    """plug-in builders whose build failed in the shared pass, with the error their own method raises"""

    def end_chunk(self) -> None:
        """A chunk of the run is answered: the learned sets' entries kept for curated_transfer are let go
        (each is handed over within its chunk; the rest would live until the run ends)."""
        self.entries.clear()


def _run(context: MethodContext) -> SetBuildingRun:
    return context.shared.get(SetBuildingRun)

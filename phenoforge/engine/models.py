"""Typed results that cross module boundaries in the engine."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

RetrieverName = Literal["bm25", "dense", "hybrid", "curated", "expansion"]


class Concept(BaseModel):
    """One vocabulary node as the rest of the project sees it."""

    concept_id: int
    vocabulary_id: str
    code: str
    name: str
    kind: str
    billable: bool


class Provenance(BaseModel):
    """Why a code is in a result: which retriever, for which query, at what rank and score."""

    retriever: RetrieverName
    query: str
    rank: int
    score: float


class Hit(BaseModel):
    code: str
    name: str
    rank: int = Field(description="1-based rank in this result")
    score: float
    provenance: list[Provenance] = Field(default_factory=list)


class SearchResult(BaseModel):
    """A ranked result. An empty result always says why in ``reason``."""

    query: str
    method: str
    hits: list[Hit] = Field(default_factory=list)
    reason: str | None = None
    degraded: bool = False
    notes: list[str] = Field(default_factory=list)

    @property
    def codes(self) -> list[str]:
        return [hit.code for hit in self.hits]


class ConceptItem(BaseModel):
    """One item of a Circe concept set, as curated resolution sees it."""

    concept_id: int | None = None
    code: str | None = None
    vocabulary_id: str
    name: str | None = None
    is_excluded: bool = False
    include_descendants: bool = False


class SkippedItem(BaseModel):
    """An item that contributed no ICD-10-CM codes, and why (reported per cohort, never silent)."""

    concept_id: int | None = None
    code: str | None = None
    vocabulary_id: str
    name: str | None = None
    reason: str


class Resolution(BaseModel):
    """ICD-10-CM codes an item list resolves to, and everything that did not resolve."""

    codes: list[str] = Field(default_factory=list)
    unresolvable: list[str] = Field(default_factory=list)
    skipped: list[SkippedItem] = Field(default_factory=list)
    excluded_codes: list[str] = Field(default_factory=list)

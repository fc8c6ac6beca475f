"""The one typed state every assembly node reads and returns.

It is plain data (Pydantic, JSON round-trip) so a session is stored whole in the app-state
database after every decision and resumed after a restart exactly where the reviewer left it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Stage = Literal["new", "decomposed", "checked", "generated", "confirming", "assembled"]
Decision = Literal["accept", "reject"]
Tier = Literal["curated", "generated"]


class CohortMatch(BaseModel):
    """One bundled cohort the curated check considered for a term, and why it did or did not match."""

    library_id: str
    library_path: str
    cohort_id: str
    cohort_name: str
    retrieval_overlap: float = Field(description="share of the term's top-k hits inside the cohort's codes")
    name_overlap: float = Field(description="share of the term's content words found in the cohort name")
    exact_name: bool = False
    n_codes: int = 0
    by_retrieval_only: bool = Field(
        default=False, description="matched because nearly all the term's hits are in this cohort alone; no name"
    )
    matched: bool = Field(
        default=True,
        description="passed the match rule; False: offered beside the matches because its name names the term",
    )
    # the scope a reviewer confirms (agent/scope.py); empty on sessions saved before it existed
    rank: int = 0
    chapters: list[str] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list)
    own_categories: list[str] = Field(default_factory=list)
    own_share: float = 0.0
    complicated: bool = False
    plain: bool = False
    extra_words: list[str] = Field(default_factory=list)
    difference: str = ""
    scope_note: str = ""

    @property
    def key(self) -> str:
        return f"{self.library_id}/{self.cohort_id}"


class TermState(BaseModel):
    """One seed term through the pipeline: curated match, ambiguity, or generated candidates."""

    term: str
    status: Literal["pending", "proposed", "curated", "ambiguous", "generated", "unmappable"] = "pending"
    curated: CohortMatch | None = None
    ambiguous: list[CohortMatch] = Field(default_factory=list)
    proposals: list[CohortMatch] = Field(
        default_factory=list, description="curated cohorts offered for the term, best-fitting scope first"
    )
    settled_by: str | None = Field(default=None, description="the reviewer who confirmed, replaced or declined")
    settlement: str | None = Field(default=None, description="what the reviewer did with the proposal, and why")
    settle_reason: str = Field(default="", description="the reviewer's reason for that choice, as typed")
    near_misses: list[CohortMatch] = Field(default_factory=list)
    candidate_codes: list[str] = Field(default_factory=list)
    search_reason: str | None = None
    search_degraded: bool = False
    note: str | None = None


class CandidateSource(BaseModel):
    """Which term's retrieval proposed a candidate, by which retriever, at which rank."""

    term: str
    retriever: str
    rank: int
    score: float
    detail: str = ""


class Candidate(BaseModel):
    """A generated code waiting for (or past) the human confirmation gate; one per code."""

    code: str
    name: str
    kind: str = ""
    billable: bool = False
    sources: list[CandidateSource] = Field(default_factory=list)
    hierarchy_hint: str = ""
    n_descendants: int = 0
    decision: Decision | None = None
    expand_descendants: bool = False
    reviewer: str | None = None
    decided_at: str | None = None
    reason: str = ""

    @property
    def terms(self) -> list[str]:
        return list(dict.fromkeys(source.term for source in self.sources))

    @property
    def best_rank(self) -> int:
        return min((source.rank for source in self.sources), default=0)


class ConceptEntry(BaseModel):
    """One code of the final concept set, with where it came from."""

    code: str
    name: str
    tier: Tier
    source: str = Field(description="'<library_id>/<cohort_id>' or '<retriever> for <term>'")
    evidence: str
    terms: list[str] = Field(default_factory=list)
    via_descendants_of: str | None = None
    decision: str = Field(default="", description="the reviewer's decision that put it here")
    reason: str = Field(default="", description="the reviewer's reason for that decision")


class Qualifier(BaseModel):
    """A part of the description no ICD-10-CM code expresses (age, setting, treatment, time, a score):
    listed back to the reviewer, to apply in the cohort's other criteria."""

    text: str
    kind: str = "other"


QUALIFIER_ADVICE = "not expressed by any ICD-10-CM code: apply it in the cohort's other criteria"


class UnmappableTerm(BaseModel):
    term: str
    reason: str


class ConceptSet(BaseModel):
    """The assembled, deduplicated concept set."""

    description: str
    entries: list[ConceptEntry] = Field(default_factory=list)
    unmappable: list[UnmappableTerm] = Field(default_factory=list)
    descendant_roots: list[str] = Field(
        default_factory=list, description="codes taken with their whole subtree (includeDescendants)"
    )
    reviewer: str = Field(default="", description="who reviewed the list; no list leaves Assemble without one")
    qualifiers: list[Qualifier] = Field(default_factory=list)

    @property
    def codes(self) -> list[str]:
        return [entry.code for entry in self.entries]


class AssemblyState(BaseModel):
    """Everything a session knows; the nodes take one and return the next."""

    session_id: str
    description: str
    reviewer: str = ""
    decomposer: str = "offline"
    library_paths: list[str] = Field(default_factory=list)
    k: int = 10
    generator: str = Field(
        default="hybrid",
        description="what proposes codes for unsettled terms: 'hybrid' (top k hits) or a set builder "
        "('adaptive_cutoff', 'subtree', 'learned': a billable list of its own size)",
    )
    stage: Stage = "new"
    terms: list[TermState] = Field(default_factory=list)
    candidates: list[Candidate] = Field(default_factory=list)
    concept_set: ConceptSet | None = None
    notes: list[str] = Field(default_factory=list)
    qualifiers: list[Qualifier] = Field(default_factory=list)
    created_at: str = ""
    updated_at: str = ""

    def candidate(self, code: str) -> Candidate | None:
        return next((candidate for candidate in self.candidates if candidate.code == code), None)

    def term_state(self, term: str) -> TermState | None:
        return next((state for state in self.terms if state.term == term), None)

    @property
    def pending(self) -> list[Candidate]:
        return [candidate for candidate in self.candidates if candidate.decision is None]

    @property
    def unsettled(self) -> list[TermState]:
        """Terms whose curated proposal the reviewer has not confirmed, replaced or declined yet. A term
        taken from a cohort without a reviewer (a session saved before the gate covered cohorts) counts."""
        return [
            term
            for term in self.terms
            if term.status in ("proposed", "ambiguous") or (term.status == "curated" and not term.settled_by)
        ]

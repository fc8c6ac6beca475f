"""What a set builder hands back: billable codes, each with the record of why it is there."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Source = Literal["hit", "rollup", "model", "fallback", "curated"]


class CodeProvenance(BaseModel):
    """Why one billable code is in a built set.

    ``source`` is ``hit`` (the code itself was retrieved and kept), ``rollup`` (a node above it was
    selected and expanded to its billable descendants), ``model`` (the membership model kept it)
    ``fallback`` (kept because nothing passed the builder's rule; the notes say so) or ``curated``
    (listed by another library group's curated cohort whose name matches the query; ``rule`` names it).
    """

    source: Source
    via_code: str = Field(description="the retrieved hit or the selected node this code comes from")
    via_rank: int | None = Field(default=None, description="fused rank of that hit, when it was one")
    score: float = Field(description="the score that put the code in: fused, subtree or probability")
    rule: str = Field(description="the builder's rule, in words, with its numbers")


class BuiltCode(BaseModel):
    code: str
    name: str
    provenance: CodeProvenance


class BuiltSet(BaseModel):
    """A builder's answer for one query. An empty set always says why in ``notes``."""

    method: str
    query: str
    codes: list[BuiltCode] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    fallback: str | None = Field(default=None, description="set when the builder fell back, and why")
    trained_on: list[str] = Field(default_factory=list, description="libraries a model or parameter was fitted on")

    @property
    def code_list(self) -> list[str]:
        return [item.code for item in self.codes]

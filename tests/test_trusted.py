"""``trusted`` makes exactly what validation makes for the plain models it serves, and refuses the rest.

This is where a pydantic release that changes how an instance keeps its state would show first.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from phenoforge.eval.matching import CohortMatches
from phenoforge.eval.runs import RunEntry
from phenoforge.setbuild.models import BuiltCode, CodeProvenance
from phenoforge.trusted import plain_fields, trusted

texts = st.text(max_size=12)
provenances = st.builds(
    dict,
    source=st.sampled_from(["hit", "rollup", "model", "fallback", "curated"]),
    via_code=texts,
    via_rank=st.none() | st.integers(1, 5000),
    score=st.floats(allow_nan=False),
    rule=texts,
)


def _same(made: BaseModel, validated: BaseModel) -> None:
    assert made == validated
    assert made.model_fields_set == validated.model_fields_set
    assert made.model_dump() == validated.model_dump()
    assert made.model_dump_json() == validated.model_dump_json()
    assert repr(made) == repr(validated)
    assert made.model_copy(update={}) == validated


@given(values=provenances, code=texts, name=texts)
def test_built_codes_equal_validated_ones(values: dict[str, Any], code: str, name: str) -> None:
    made = trusted(BuiltCode, code=code, name=name, provenance=trusted(CodeProvenance, **values))
    _same(made, BuiltCode.model_validate({"code": code, "name": name, "provenance": values}))


@given(code=texts, rank=st.integers(1, 10**6), score=st.none() | st.floats(allow_nan=False), notes=st.lists(texts))
def test_run_entries_equal_validated_ones(code: str, rank: int, score: float | None, notes: list[str]) -> None:
    made = trusted(RunEntry, code=code, rank=rank, score=score, provenance=notes)
    _same(made, RunEntry(code=code, rank=rank, score=score, provenance=notes))


def test_a_trusted_model_is_its_own_object() -> None:
    """Assigning to one (pydantic records the field as set) leaves another alone."""
    first = trusted(RunEntry, code="E11.9", rank=1, score=0.5, provenance=["hit"])
    second = trusted(RunEntry, code="E11.9", rank=1, score=0.5, provenance=["hit"])
    first.code = "I50.9"
    assert second.code == "E11.9" and first.model_fields_set is not second.model_fields_set


class _Aliased(BaseModel):
    value: int = Field(alias="v")


def test_models_it_cannot_make_are_refused() -> None:
    with pytest.raises(TypeError, match="private attributes"):
        plain_fields(CohortMatches)  # the measures' memo is a private attribute
    with pytest.raises(TypeError, match="aliases"):
        trusted(_Aliased, value=1)
    assert plain_fields(RunEntry) == ("code", "rank", "score", "provenance")


def test_a_field_left_out_misordered_or_unknown_is_refused() -> None:
    """Left to its default, a field would be missing from the instance (no attribute, absent from a run's JSON
    export); given out of order, the export's keys would come in another order than validation gives."""
    with pytest.raises(TypeError, match="rank, score, provenance"):
        trusted(RunEntry, code="E11.9")  # the defaults validation would fill in
    with pytest.raises(TypeError, match="declared order"):
        trusted(RunEntry, rank=1, code="E11.9", score=None, provenance=[])
    with pytest.raises(TypeError, match="unknown"):
        trusted(RunEntry, code="E11.9", rank=1, score=None, provenance=[], note="x")

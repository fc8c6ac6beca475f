"""The Assemble generate step with a set builder, attacked: what the builder said must reach the reviewer."""

from __future__ import annotations

import duckdb

from phenoforge.agent import workflow
from tests.agent.test_workflow import fixed


def test_a_generated_terms_note_carries_what_the_set_builder_said(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """The term's note kept only the count and a fallback: 'built from the code's name', 'ignored words' or
    'fitted for this run only' never reached the reviewer deciding on the codes."""
    state = workflow.start(
        fixture_con, "asthma", fixed(["J45", "Heart failure сердечная"]), library_paths=[], generator="subtree"
    )
    by_term = {term.term: term for term in state.terms}
    assert by_term["J45"].status == "generated"
    assert "the query is the code J45" in (by_term["J45"].note or ""), by_term["J45"].note
    assert "ignored 'сердечная'" in (by_term["Heart failure сердечная"].note or ""), by_term["Heart failure сердечная"]

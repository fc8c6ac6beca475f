"""A knowledge view remembers its latest queries' name similarities: the same matches, computed
once per query (the learned features, their provenance note and curated_transfer each ask), bounded."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from phenoforge.setbuild import knowledge, transfer
from phenoforge.setbuild.transfer import CuratedKnowledge, KnownCohort, name_words, polarity


def _cohort(library: str, group: str, cohort_id: str, name: str) -> KnownCohort:
    return KnownCohort(
        library_id=library,
        groups=frozenset({group}),
        cohort_id=cohort_id,
        cohort_name=name,
        ids=np.array([1, 2], dtype=np.int64),
        categories=Counter(),
        words=name_words(name),
        polarity=polarity(name),
    )


@pytest.fixture
def view() -> transfer.KnowledgeView:
    knowledge = CuratedKnowledge(
        [
            _cohort("hcc", "cms-hcc", "hf", "Heart failure"),
            _cohort("hcc", "cms-hcc", "dm", "Diabetes without complications"),
            _cohort("elix", "elixhauser", "chf", "Congestive heart failure"),
        ]
    )
    return knowledge.view(["elixhauser"])


def test_matches_are_computed_once_per_query_and_stay_the_same(
    view: transfer.KnowledgeView, monkeypatch: pytest.MonkeyPatch
) -> None:
    computed: list[str] = []
    original = transfer.KnowledgeView.similarities

    def counting(self: transfer.KnowledgeView, query: str) -> np.ndarray:
        computed.append(query)
        return original(self, query)

    monkeypatch.setattr(transfer.KnowledgeView, "similarities", counting)
    first = view.matches("heart failure")
    assert [m.cohort.cohort_id for m in first] == ["hf", "dm"]  # the excluded group's cohort never shows
    again = view.matches("heart failure", depth=1)
    assert [(m.cohort.cohort_id, m.similarity) for m in again] == [(first[0].cohort.cohort_id, first[0].similarity)]
    assert computed == ["heart failure"]
    assert view.matches("diabetes")[0].cohort.cohort_id == "dm" and computed == ["heart failure", "diabetes"]


def test_only_the_latest_queries_are_kept(view: transfer.KnowledgeView, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(knowledge, "RECENT_QUERIES", 2)
    for query in ("heart failure", "diabetes", "asthma", "heart"):
        view.matches(query)
    assert list(view._recent) == ["asthma", "heart"]

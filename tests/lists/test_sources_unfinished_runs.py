"""A saved run that never finished is not offered as a list source, and naming it says why."""

from __future__ import annotations

import pytest

from phenoforge import app_state
from phenoforge.lists.sources import run_list, saved_run_choices


def test_an_unfinished_run_is_not_offered_and_naming_it_says_it_did_not_finish() -> None:
    parameters = app_state.BenchmarkParameters(methods=["bm25"], k=10, dense_weight=0.5, cohort_ids=["c1"])
    writer = app_state.BenchmarkRunWriter(parameters, "lib", "/x/lib", "rel", "b1")  # begun, never finished
    assert [choice.run_id for choice in saved_run_choices()] == []
    with pytest.raises(app_state.UnfinishedRunError, match="did not finish"):
        run_list(f"{writer.run_id}/bm25/c1")

"""Explore: side-by-side search and code lookup, against the engine's own answers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge.engine.bm25 import bm25_search
from phenoforge.engine.expansion import expand_ancestors
from tests.dashboard.conftest import shown


def test_search_side_by_side(app: Callable[[str], AppTest], dash_con: duckdb.DuckDBPyConnection) -> None:
    at = app("pages/5_Explore.py").run()
    assert not at.exception
    at.text_input(key="ex_query").input("heart failure").run()
    assert not at.exception
    frames = [d.value for d in at.dataframe if "score" in d.value.columns]
    assert len(frames) == 3  # bm25, dense, hybrid
    assert list(frames[0]["code"]) == bm25_search(dash_con, "heart failure", k=10).codes
    assert all(len(frame) > 0 for frame in frames)


def test_lookup_shows_ancestors_children_notes_and_cohorts(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    at = app("pages/5_Explore.py")
    at.query_params["code"] = "i50.21"
    at.run()
    assert not at.exception
    assert any(shown(m.value).startswith("### I50.21 · Acute systolic") for m in at.markdown)
    frames = {tuple(d.value.columns): d.value for d in at.dataframe}
    ancestors = frames[("code", "name", "kind")]
    assert list(ancestors["code"]) == expand_ancestors(dash_con, "I50.21")
    cohorts = frames[("library_id", "cohort_id", "cohort_name")]
    assert list(cohorts["cohort_id"]) == ["519"]
    at.text_input(key="ex_code").input("E11").run()
    frames = {tuple(d.value.columns): d.value for d in at.dataframe}
    assert list(frames[("code", "name", "billable")]["code"]) == ["E11.2", "E11.5", "E11.6", "E11.9"]
    notes = frames[("note_type", "text")]
    assert set(notes["text"]) == {"diabetes NOS", "gestational diabetes (O24.4-)"}


def test_unknown_code_says_what_to_do(app: Callable[[str], AppTest]) -> None:
    at = app("pages/5_Explore.py").run()
    at.text_input(key="ex_code").input("Z99.999").run()
    assert not at.exception
    assert any("not a code in the loaded vocabulary" in w.value for w in at.warning)


def test_search_spells_out_an_abbreviation_and_says_so(
    app: Callable[[str], AppTest], dash_con: duckdb.DuckDBPyConnection
) -> None:
    """The Explore page searched "CHF" as typed (no ICD-10-CM text says CHF) while the CLI spelt it out."""
    at = app("pages/5_Explore.py").run()
    at.text_input(key="ex_query").input("CHF").run()
    assert not at.exception
    assert any("searched as 'congestive heart failure'" in shown(caption.value) for caption in at.caption)
    frames = [d.value for d in at.dataframe if "score" in d.value.columns]
    assert list(frames[0]["code"]) == bm25_search(dash_con, "congestive heart failure", k=10).codes


def test_an_empty_query_says_what_to_type(app: Callable[[str], AppTest]) -> None:
    at = app("pages/5_Explore.py").run()
    assert not at.exception
    assert any("Type a condition" in i.value for i in at.info)


def test_a_query_nothing_supports_is_flagged_for_every_method_with_results_kept(
    app: Callable[[str], AppTest],
) -> None:
    at = app("pages/5_Explore.py").run()
    at.text_input(key="ex_query").set_value("glorp snarfle wibble").run()
    assert not at.exception
    assert any("Nothing in the vocabulary supports this query" in w.value for w in at.warning)
    assert len(at.dataframe) >= 2  # dense and hybrid still show their nearest codes, under the warning
    at.text_input(key="ex_query").set_value("heart failure").run()
    assert not any("Nothing in the vocabulary supports" in w.value for w in at.warning)


def test_support_rule_uses_bm25_and_the_calibrated_dense_threshold() -> None:
    from phenoforge.dashboard.explore import unsupported

    assert unsupported(bm25_empty=True, dense_top=0.2, threshold=0.4)
    assert unsupported(bm25_empty=False, dense_top=0.2, threshold=0.4)  # a shared word is no support
    assert not unsupported(bm25_empty=True, dense_top=0.6, threshold=0.4)  # a typo the dense model still reads
    assert unsupported(bm25_empty=True, dense_top=0.9, threshold=None)  # an uncalibrated embedder: BM25 decides
    assert not unsupported(bm25_empty=False, dense_top=None, threshold=0.4)


def test_the_calibrated_threshold_separates_the_held_out_queries() -> None:
    """The shipped threshold against the recorded real-model scores of the held-out halves."""
    import json

    from phenoforge.config import REPO_ROOT
    from phenoforge.dashboard.explore import DENSE_SUPPORT_THRESHOLD, unsupported

    recorded = json.loads((REPO_ROOT / "bench" / "query_support" / "calibration.json").read_text())
    assert recorded["threshold"] == pytest.approx(DENSE_SUPPORT_THRESHOLD, abs=1e-3)
    for name, should_flag in (("clinical", False), ("nonsense", True)):
        held_out = [q for q in recorded["per_query"][name] if q["held_out"]]
        assert len(held_out) == 20
        flagged = [unsupported(q["bm25_empty"], q["dense_top"], DENSE_SUPPORT_THRESHOLD) for q in held_out]
        assert flagged == [should_flag] * 20

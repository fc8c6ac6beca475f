"""score_decomposition on the fixture vocabulary and library; the shipped case sets' shape."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from phenoforge.agent.errors import ClaudeRateLimitError
from phenoforge.eval.decomposition import (
    DEFAULT_TEST_CASES,
    OHDSI_TEST_CASES,
    DecompositionTestCase,
    repeat_decomposition,
    score_decomposition,
)
from tests.agent.conftest import write_fixture_library


@pytest.fixture
def library(tmp_path: Path) -> Path:
    return write_fixture_library(tmp_path / "libs" / "fixlib")


def case(description: str, cohort_id: str) -> DecompositionTestCase:
    return DecompositionTestCase(population_description=description, cohort_id=cohort_id, source="test",
                                 library_id="fixlib")


TABLE = {
    "adults with asthma": ["asthma"],
    "patients with atrial fibrillation": ["atrial fibrillation"],
    "adults with a femur fracture": ["fracture of femur"],
    "adults with asthma or heart failure": ["asthma", "heart failure"],
}


def table_decomposer(description: str) -> list[str]:
    return TABLE[description]


def test_landing_and_gap(fixture_con, library: Path) -> None:
    cases = [case("adults with asthma", "fix-ASTHMA"), case("patients with atrial fibrillation", "fix-AF1"),
             case("adults with asthma or heart failure", "fix-HF")]
    report = score_decomposition(fixture_con, library, table_decomposer, test_cases=cases)
    assert report.n_scored == 3 and report.retrieval.startswith("hybrid, BM25 only")
    asthma, af, both = report.results
    assert asthma.term_resolutions[0].landed == "target" and asthma.term_resolutions[0].tier == "curated"
    assert asthma.decomposed_hierarchical_score == pytest.approx(1.0)
    assert af.term_resolutions[0].landed == "ambiguous"
    assert set(af.term_resolutions[0].matched_cohort_ids) == {"fix-AF1", "fix-AF2"}
    assert af.term_resolutions[0].tier == "generated" and af.term_resolutions[0].codes
    landed = {t.term: (t.landed, t.matched_cohort_ids) for t in both.term_resolutions}
    assert landed == {"asthma": ("other", ["fix-ASTHMA"]), "heart failure": ("target", ["fix-HF"])}
    for result in report.results:
        assert result.gap == pytest.approx(result.baseline_hierarchical_score - result.decomposed_hierarchical_score)
        assert result.library_id == "fixlib" and result.n_ground_truth > 0
    assert report.mean_gap == pytest.approx(sum(r.gap for r in report.results) / 3)
    assert report.landed_counts == {"target": 2, "ambiguous": 1, "other": 1}
    # asthma codes over-included for the heart-failure target: decomposition cost accuracy there
    assert both.decomposed_over_inclusion > 0


def test_fall_through_to_generation(fixture_con, library: Path) -> None:
    report = score_decomposition(fixture_con, library, table_decomposer,
                                 test_cases=[case("adults with a femur fracture", "fix-HF")])
    resolution = report.results[0].term_resolutions[0]
    assert resolution.landed == "none" and resolution.tier == "generated"
    assert "S72" in resolution.codes and report.results[0].predicted_codes


def test_errors_are_recorded_and_left_out_of_the_mean(fixture_con, library: Path) -> None:
    def flaky(description: str) -> list[str]:
        if "asthma" in description:
            raise ClaudeRateLimitError("the Anthropic API rate limit was hit (HTTP 429)")
        return ["heart failure"]

    cases = [case("adults with asthma", "fix-ASTHMA"), case("adults with heart failure", "fix-HF")]
    report = score_decomposition(fixture_con, library, flaky, test_cases=cases)
    assert "429" in (report.results[0].error or "")
    assert report.n_scored == 1 and report.mean_gap == pytest.approx(report.results[1].gap)


def test_missing_cohort_is_skipped(fixture_con, library: Path) -> None:
    missing = DecompositionTestCase(population_description="x", cohort_id="nope", source="t", library_id="fixlib")
    report = score_decomposition(fixture_con, library, table_decomposer, test_cases=[missing])
    assert report.results == [] and report.skipped and "nope" in report.skipped[0]


def test_library_root_selects_each_case_library(fixture_con, library: Path) -> None:
    report = score_decomposition(fixture_con, library.parent, table_decomposer,
                                 test_cases=[case("adults with asthma", "fix-ASTHMA")])
    assert report.n_scored == 1 and report.results[0].term_resolutions[0].landed == "target"


def test_repeat_reports_the_spread(fixture_con, library: Path) -> None:
    answers = itertools.cycle([["asthma"], ["fracture of femur"]])

    def wobbly(description: str) -> list[str]:
        return next(answers)

    report = repeat_decomposition(fixture_con, library, wobbly, 2,
                                  test_cases=[case("adults with asthma", "fix-ASTHMA")])
    spread = report.cases[0]
    assert report.n == 2 and len(spread.gaps) == 2
    assert spread.distinct_term_sets == [["asthma"], ["fracture of femur"]]
    assert spread.max_gap > spread.min_gap and spread.stdev_gap > 0
    assert report.stdev_mean_gap > 0
    with pytest.raises(ValueError):
        repeat_decomposition(fixture_con, library, wobbly, 0)


def test_default_cases_cover_the_bundled_libraries_and_patterns() -> None:
    from phenoforge.libraries import read_cms_hcc, read_elixhauser

    names = {cohort.cohort_id: cohort.cohort_name for source in (read_elixhauser(), read_cms_hcc("V28"),
                                                                 read_cms_hcc("V24")) for cohort in source.cohorts}
    assert len(DEFAULT_TEST_CASES) >= 30
    assert {c.library_id for c in DEFAULT_TEST_CASES} == {"elixhauser", "cms-hcc-v28", "cms-hcc-v24"}
    assert set(Counter(c.pattern for c in DEFAULT_TEST_CASES)) >= {"single", "and", "or", "qualifiers", "lay"}
    for test_case in DEFAULT_TEST_CASES:
        assert test_case.cohort_id in names, test_case.cohort_id
        assert test_case.source.strip()
        # never the display name itself: always framed the way a study population is written
        name_words = set(names[test_case.cohort_id].lower().replace(",", " ").split())
        words = set(test_case.population_description.lower().replace(",", " ").split())
        assert words - name_words, (test_case.cohort_id, "description adds nothing to the cohort name")
        assert test_case.population_description.lower() != names[test_case.cohort_id].lower()
    assert len({(c.cohort_id, c.population_description) for c in DEFAULT_TEST_CASES}) == len(DEFAULT_TEST_CASES)


def test_ohdsi_cases_are_the_reference_set() -> None:
    assert [c.cohort_id for c in OHDSI_TEST_CASES] == [
        "503", "40", "288", "499", "611", "619", "647", "687", "510", "513", "519", "507", "521", "594",
        "602", "457", "549", "524", "463", "775", "626", "558", "563"]
    assert OHDSI_TEST_CASES[0].population_description == "adults with type 2 diabetes mellitus"
    assert OHDSI_TEST_CASES[12].population_description == "adults with a physician's diagnosis of asthma"
    assert all(c.library_id == "ohdsi" for c in OHDSI_TEST_CASES)

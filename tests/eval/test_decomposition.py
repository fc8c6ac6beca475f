"""score_decomposition on the fixture vocabulary and library; the shipped case sets' shape."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from phenoforge.agent.errors import ClaudeRateLimitError, ClaudeTimeoutError
from phenoforge.errors import ImportRowError
from phenoforge.eval.decomposition import (
    DEFAULT_TEST_CASES,
    NEW_TEST_CASES,
    OHDSI_TEST_CASES,
    DecompositionTestCase,
    NoCaseRanError,
    cases_for_split,
    landing_rate,
    load_cases_csv,
    parse_cases_csv,
    ran_summary,
    repeat_decomposition,
    score_decomposition,
)
from tests.agent.conftest import write_fixture_library


@pytest.fixture
def library(tmp_path: Path) -> Path:
    return write_fixture_library(tmp_path / "libs" / "fixlib")


def case(description: str, cohort_id: str) -> DecompositionTestCase:
    return DecompositionTestCase(
        population_description=description, cohort_id=cohort_id, source="test", library_id="fixlib"
    )


TABLE = {
    "adults with asthma": ["asthma"],
    "patients with atrial fibrillation": ["atrial fibrillation"],
    "adults with a femur fracture": ["fracture of femur"],
    "adults with asthma or heart failure": ["asthma", "heart failure"],
}


def table_decomposer(description: str) -> list[str]:
    return TABLE[description]


def test_landing_and_gap(fixture_con, library: Path) -> None:
    cases = [
        case("adults with asthma", "fix-ASTHMA"),
        case("patients with atrial fibrillation", "fix-AF1"),
        case("adults with asthma or heart failure", "fix-HF"),
    ]
    report = score_decomposition(fixture_con, library, table_decomposer, test_cases=cases)
    assert report.n_scored == 3 and report.retrieval.startswith("hybrid, BM25 only")
    asthma, af, both = report.results
    assert asthma.term_resolutions[0].landed == "target" and asthma.term_resolutions[0].tier == "curated"
    assert asthma.decomposed_hierarchical_score == pytest.approx(1.0)
    # two cohorts match: without the human gate the first proposal (best-fitting scope) is confirmed, here the
    # narrower AF2 (I48.0, I48.91), not the target AF1 (all of I48)
    assert af.term_resolutions[0].landed == "other" and af.term_resolutions[0].matched_cohort_ids == ["fix-AF2"]
    assert af.term_resolutions[0].tier == "curated" and af.term_resolutions[0].codes
    landed = {t.term: (t.landed, t.matched_cohort_ids) for t in both.term_resolutions}
    assert landed == {"asthma": ("other", ["fix-ASTHMA"]), "heart failure": ("target", ["fix-HF"])}
    for result in report.results:
        assert result.gap == pytest.approx(result.baseline_hierarchical_score - result.decomposed_hierarchical_score)
        assert result.library_id == "fixlib" and result.n_ground_truth > 0
    assert report.mean_gap == pytest.approx(sum(r.gap for r in report.results) / 3)
    assert report.landed_counts == {"target": 2, "other": 2}
    # asthma codes over-included for the heart-failure target: decomposition cost accuracy there
    assert both.decomposed_over_inclusion > 0


def test_fall_through_to_generation(fixture_con, library: Path) -> None:
    report = score_decomposition(
        fixture_con, library, table_decomposer, test_cases=[case("adults with a femur fracture", "fix-HF")]
    )
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
    report = score_decomposition(
        fixture_con, library, table_decomposer, test_cases=[missing, case("adults with asthma", "fix-ASTHMA")]
    )
    assert report.n_scored == 1 and report.skipped and "nope" in report.skipped[0]


def test_no_case_can_run_is_an_error_not_a_zero_mean(fixture_con, tmp_path: Path) -> None:
    """Called as the reference shows, on a folder where no case's cohort exists: say what is missing."""
    empty = tmp_path / "fetched"
    empty.mkdir()
    with pytest.raises(NoCaseRanError) as caught:
        score_decomposition(fixture_con, empty, table_decomposer)
    message = str(caught.value)
    assert f"none of the {len(DEFAULT_TEST_CASES)} test cases" in message
    assert "cms-hcc-v24, cms-hcc-v28, elixhauser" in message and "no library" in message
    assert "elix-HF" in message


def test_ran_summary_and_landing_rate(fixture_con, library: Path) -> None:
    def fails_on_asthma(description: str) -> list[str]:
        if "asthma" in description:
            raise ClaudeTimeoutError("the Anthropic API did not answer within 5 s; try again, or raise --timeout")
        return ["heart failure"]

    cases = [case("adults with asthma", "fix-ASTHMA"), case("adults with heart failure", "fix-HF")]
    partial = score_decomposition(fixture_con, library, fails_on_asthma, test_cases=cases)
    summary = ran_summary(partial)
    assert summary.startswith("1 of 2 cases ran (1 failed: 1 ClaudeTimeoutError")
    assert "means are over the 1 that ran" in summary
    assert partial.mean_decomposed_hierarchical_score == pytest.approx(partial.results[1].decomposed_hierarchical_score)
    assert landing_rate(partial) == 1.0

    def always_fails(description: str) -> list[str]:
        raise ClaudeTimeoutError("the Anthropic API did not answer within 5 s; try again, or raise --timeout")

    failed = score_decomposition(fixture_con, library, always_fails, test_cases=cases)
    assert ran_summary(failed) == (
        "0 of 2 cases ran: ClaudeTimeoutError: the Anthropic API did not answer "
        "within 5 s; try again, or raise --timeout"
    )
    assert landing_rate(failed) == 0.0
    assert (
        ran_summary(
            score_decomposition(
                fixture_con, library, table_decomposer, test_cases=[case("adults with asthma", "fix-ASTHMA")]
            )
        )
        == "1 of 1 cases ran"
    )


def test_cases_csv_reports_every_bad_line(library: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "population_description,cohort_id,library,source\n"
        "adults with asthma,fix-ASTHMA,fixlib,trial X\n"
        ",fix-HF,fixlib,\n"
        "adults with gout,fix-GOUT,fixlib,\n"
        "adults with asthma,fix-ASTHMA,otherlib,\n"
        "adults with asthma,fix-ASTHM,fixlib,\n",
        encoding="utf-8",
    )
    with pytest.raises(ImportRowError) as caught:
        load_cases_csv(bad, libraries_root=library.parent)
    message = str(caught.value)
    assert "4 bad line(s)" in message
    assert "line 3: population_description is empty" in message
    assert "line 4: cohort 'fix-GOUT' is not in library 'fixlib'" in message  # the library is there
    assert "line 5: library 'otherlib' is not installed (installed: fixlib)" in message
    assert "line 6: cohort 'fix-ASTHM' is not in library 'fixlib' (did you mean fix-ASTHMA?)" in message
    with pytest.raises(ImportRowError, match="line 1: missing column"):
        parse_cases_csv("description,cohort\nx,y\n", libraries_root=library.parent)
    with pytest.raises(ImportRowError, match="no such file"):
        load_cases_csv(tmp_path / "absent.csv")


def test_cases_csv_without_library_finds_the_cohort(fixture_con, library: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.csv"
    good.write_text(
        "cohort_id,population_description\nfix-ASTHMA,children with asthma on inhaled steroids\n", encoding="utf-8"
    )
    cases = load_cases_csv(good, libraries_root=library.parent)
    assert [(c.cohort_id, c.library_id, c.source) for c in cases] == [("fix-ASTHMA", "", f"{good} line 2")]
    report = score_decomposition(fixture_con, library.parent, lambda description: ["asthma"], test_cases=cases)
    assert report.n_scored == 1 and report.results[0].library_id == "fixlib"


def test_library_root_selects_each_case_library(fixture_con, library: Path) -> None:
    report = score_decomposition(
        fixture_con, library.parent, table_decomposer, test_cases=[case("adults with asthma", "fix-ASTHMA")]
    )
    assert report.n_scored == 1 and report.results[0].term_resolutions[0].landed == "target"


def test_repeat_reports_the_spread(fixture_con, library: Path) -> None:
    answers = itertools.cycle([["asthma"], ["fracture of femur"]])

    def wobbly(description: str) -> list[str]:
        return next(answers)

    report = repeat_decomposition(
        fixture_con, library, wobbly, 2, test_cases=[case("adults with asthma", "fix-ASTHMA")]
    )
    spread = report.cases[0]
    assert report.n == 2 and len(spread.gaps) == 2
    assert spread.distinct_term_sets == [["asthma"], ["fracture of femur"]]
    assert spread.max_gap > spread.min_gap and spread.stdev_gap > 0
    assert report.stdev_mean_gap > 0
    assert report.mean_gap_ci_low <= report.mean_gap <= report.mean_gap_ci_high
    assert report.n_runs_scored == 2
    with pytest.raises(ValueError):
        repeat_decomposition(fixture_con, library, wobbly, 0)


def test_default_cases_cover_the_bundled_libraries_and_patterns() -> None:
    from phenoforge.libraries import read_cms_hcc, read_elixhauser

    names = {
        cohort.cohort_id: cohort.cohort_name
        for source in (read_elixhauser(), read_cms_hcc("V28"), read_cms_hcc("V24"))
        for cohort in source.cohorts
    }
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
        "503",
        "40",
        "288",
        "499",
        "611",
        "619",
        "647",
        "687",
        "510",
        "513",
        "519",
        "507",
        "521",
        "594",
        "602",
        "457",
        "549",
        "524",
        "463",
        "775",
        "626",
        "558",
        "563",
    ]
    assert OHDSI_TEST_CASES[0].population_description == "adults with type 2 diabetes mellitus"
    assert OHDSI_TEST_CASES[12].population_description == "adults with a physician's diagnosis of asthma"
    assert all(c.library_id == "ohdsi" for c in OHDSI_TEST_CASES)


def test_split_is_declared_and_disjoint() -> None:
    dev, test = cases_for_split("dev"), cases_for_split("test")
    assert len(dev) + len(test) == len(DEFAULT_TEST_CASES) and abs(len(dev) - len(test)) <= 1
    assert not {c.population_description for c in dev} & {c.population_description for c in test}
    for half in (dev, test):  # each half spans every bundled library
        assert {c.library_id for c in half} == {"elixhauser", "cms-hcc-v28", "cms-hcc-v24"}
    with pytest.raises(ValueError):
        cases_for_split("train")


def test_new_cases_are_eligibility_criteria_with_sources() -> None:
    from phenoforge.libraries import read_cms_hcc, read_elixhauser

    names = {
        cohort.cohort_id
        for source in (read_elixhauser(), read_cms_hcc("V28"), read_cms_hcc("V24"))
        for cohort in source.cohorts
    }
    assert len(NEW_TEST_CASES) >= 40 and cases_for_split("new") == NEW_TEST_CASES
    assert all(c.split == "new" and len(c.source) > 20 and c.cohort_id in names for c in NEW_TEST_CASES)
    assert set(Counter(c.pattern for c in NEW_TEST_CASES)) >= {"medication", "setting", "lab", "staging", "time", "lay"}
    old = {c.population_description for c in DEFAULT_TEST_CASES}
    assert not old & {c.population_description for c in NEW_TEST_CASES}


def test_the_bundled_case_sets_are_read_from_their_csv_files_with_their_declared_halves() -> None:
    from phenoforge.eval.decomposition_cases import CASE_SETS, CASES_DIR

    assert sorted(path.stem for path in CASES_DIR.glob("*.csv")) == sorted(CASE_SETS)
    for name in ("default", "ohdsi"):  # every other case in file order is development, the rest test
        assert [case.split for case in CASE_SETS[name]] == ["dev", "test"] * (len(CASE_SETS[name]) // 2) + (
            ["dev"] if len(CASE_SETS[name]) % 2 else []
        )
    assert {case.split for case in CASE_SETS["new"]} == {"new"}
    assert all(
        case.population_description and case.cohort_id and case.source for cs in CASE_SETS.values() for case in cs
    )


def test_a_case_file_with_an_unknown_split_is_refused(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    from phenoforge.eval import decomposition_cases

    (tmp_path / "broken.csv").write_text(
        "population_description,cohort_id,library,source,pattern,split\nadults with gout,g,elixhauser,s,lay,later\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(decomposition_cases, "CASES_DIR", tmp_path)
    with pytest.raises(decomposition_cases.CaseFileError, match="broken.csv line 2: split 'later'"):
        decomposition_cases.load_case_set("broken")

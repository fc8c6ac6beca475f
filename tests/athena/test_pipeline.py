"""The whole OHDSI path: load Athena, fetch cohorts from a local copy, resolve, benchmark."""

from __future__ import annotations

from pathlib import Path

import duckdb

from phenoforge.athena.loader import load_athena
from phenoforge.athena.ohdsi import fetch_ohdsi_library
from phenoforge.engine.curated import load_curated_concept_set
from phenoforge.eval.harness import run_benchmark
from tests.athena.athena_fixture import EXPECTED_CODES, GROUPER_ID, write_phenotype_clone


def test_load_fetch_resolve_benchmark(athena_dir: Path, tmp_path: Path) -> None:
    db_path = tmp_path / "vocab.duckdb"
    load_athena(athena_dir, db_path)
    library_dir = tmp_path / "libraries" / "ohdsi"
    manifest = fetch_ohdsi_library(
        library_dir, ids=list(EXPECTED_CODES), from_dir=write_phenotype_clone(tmp_path / "PhenotypeLibrary")
    )
    assert manifest.report["failures"] == {}
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        t2dm = load_curated_concept_set(con, library_dir, "9288")
        assert t2dm.codes == EXPECTED_CODES["9288"]
        # type 1 and secondary diabetes are exclusion sets, and never entered the codes
        assert not {"E10", "E10.9", "E09.9"} & set(t2dm.codes)
        assert t2dm.other_concept_sets == ["Chronic kidney disease"]
        assert t2dm.unresolvable == ["SNOMED concept 1040", "SNOMED concept 424242"]
        reasons = {item.vocabulary_id + " " + str(item.concept_id): item.reason for item in t2dm.skipped}
        assert reasons["LOINC 3000"].startswith("out of scope")
        assert reasons["ATC 21600712"].startswith("out of scope")
        assert reasons["SNOMED 1050"].startswith("no ICD-10-CM code maps to it")

        asthma = load_curated_concept_set(con, library_dir, "9521")
        assert asthma.codes == EXPECTED_CODES["9521"]
        assert [item.concept_id for item in asthma.skipped] == [GROUPER_ID]
        wide = load_curated_concept_set(con, library_dir, "9521", fanout_threshold=500)
        assert len(wide.codes) == len(EXPECTED_CODES["9521"]) + 120

        report = run_benchmark(
            con, library_dir, list(EXPECTED_CODES), methods=["bm25", "hybrid", "expand_descendants"], k=10
        )
    finally:
        con.close()
    assert {result.cohort_id for result in report.results} == set(EXPECTED_CODES)
    for result in report.results:
        assert result.ground_truth_codes == EXPECTED_CODES[result.cohort_id]
        assert 0.0 <= result.hierarchical_score <= 1.0
    heart = next(r for r in report.results if r.cohort_id == "9519" and r.method == "bm25")
    assert heart.coverage > 0.5 and "I50.9" in heart.predicted_codes
    assert set(report.mean_hierarchical_score_by_method) == {"bm25", "hybrid", "expand_descendants"}


def test_decomposition_runs_on_the_ohdsi_library(athena_dir: Path, tmp_path: Path) -> None:
    """The reference's OHDSI decomposition cases run unchanged once the library is there."""
    import json

    from phenoforge.eval.decomposition import OHDSI_TEST_CASES, score_decomposition
    from tests.athena.athena_fixture import asthma_cohort, cohorts_csv_text, heart_failure_cohort

    db_path = tmp_path / "vocab.duckdb"
    load_athena(athena_dir, db_path)
    copy = tmp_path / "PhenotypeLibrary"
    (copy / "cohorts").mkdir(parents=True)
    rows = [
        {"cohortId": "519", "cohortName": "[P][R] Heart failure"},
        {"cohortId": "521", "cohortName": "[P][R] Asthma"},
    ]
    (copy / "Cohorts.csv").write_text(
        cohorts_csv_text(
            extra_rows=[
                {
                    **row,
                    "cohortNameLong": "",
                    "status": "",
                    "logicDescription": "",
                    "hashTag": "",
                    "recommendedReferentConceptIds": "",
                }
                for row in rows
            ]
        )
    )
    (copy / "cohorts" / "519.json").write_text(json.dumps(heart_failure_cohort()))
    (copy / "cohorts" / "521.json").write_text(json.dumps(asthma_cohort()))
    library_dir = tmp_path / "ohdsi"
    fetch_ohdsi_library(library_dir, ids=["519", "521"], from_dir=copy)
    cases = [case for case in OHDSI_TEST_CASES if case.cohort_id in ("519", "521")]
    assert len(cases) == 2
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        report = score_decomposition(con, library_dir, lambda text: ["heart failure", "asthma"], test_cases=cases)
    finally:
        con.close()
    assert sorted(result.cohort_id for result in report.results) == ["519", "521"]
    heart = next(result for result in report.results if result.cohort_id == "519")
    assert heart.error is None and heart.seed_terms == ["heart failure", "asthma"]
    assert "I50.9" in heart.predicted_codes

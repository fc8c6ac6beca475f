"""Evaluate the agent's decompose step, isolated from retrieval quality.

``run_benchmark`` measures retrieval given an already-correct search term; this measures the step
before it. For each test case it compares hybrid search with the cohort's own name (decomposition
skipped: the baseline) against the real pipeline from the free-text description (decompose, then
per-term curated/generated resolution exactly as ``agent.nodes`` does it, minus the human gate:
every generated candidate is accepted), both scored by ``score_cohort`` against the same curated
ground truth. ``gap = baseline - decomposed``: positive means decomposition cost accuracy.

Per case the report says where the curated check landed for every seed term: the target cohort,
another cohort, several (ambiguous), or none (generated retrieval).

The curated check for a case runs against the case's own library (as if the researcher had picked
that library), so near-duplicate cohorts inside one library are what make a term ambiguous.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from pydantic import BaseModel, Field

from phenoforge.agent import nodes
from phenoforge.config import ProgressCallback
from phenoforge.engine.curated import Library, list_libraries, load_curated_concept_set, load_library
from phenoforge.engine.hybrid import hybrid_search
from phenoforge.errors import PhenoforgeError
from phenoforge.eval.harness import score_cohort
from phenoforge.eval.models import DecompositionCaseResult, DecompositionReport, TermResolution

if TYPE_CHECKING:
    from phenoforge.engine.dense import DenseRetriever


class DecompositionTestCase(BaseModel):
    """A free-text population description mapped to the cohort it should resolve to."""

    population_description: str = Field(description="phrased like a real study population, not the cohort name")
    cohort_id: str
    source: str = Field(description="where the phrasing pattern came from; documentation only")
    library_id: str = Field(
        default="ohdsi",
        description="library directory the cohort belongs to: elixhauser, cms-hcc-v28, cms-hcc-v24, ohdsi",
    )
    pattern: str = Field(default="single", description="single, and, or, qualifiers, lay")


def _case(library: str, cohort: str, description: str, source: str, pattern: str) -> DecompositionTestCase:
    return DecompositionTestCase(
        population_description=description, cohort_id=cohort, source=source, library_id=library, pattern=pattern
    )


E, V28, V24 = "elixhauser", "cms-hcc-v28", "cms-hcc-v24"

DEFAULT_TEST_CASES: list[DecompositionTestCase] = [
    # --- Elixhauser ---------------------------------------------------------------------------
    _case(E, "elix-HF", "patients hospitalized for heart failure with reduced ejection fraction",
          "HFrEF outcome-trial population phrasing (DAPA-HF / PARADIGM-HF style), hospitalisation qualifier",
          "qualifiers"),
    _case(E, "elix-HTN_UNCX", "adults with high blood pressure",
          "lay-summary phrasing used in plain-language trial summaries (e.g. SPRINT)", "lay"),
    _case(E, "elix-DIAB_UNCX", "adults with type 2 diabetes inadequately controlled on metformin",
          "phase 3 glucose-lowering trial title pattern '... inadequately controlled on metformin'", "qualifiers"),
    _case(E, "elix-DIAB_CX", "patients with type 2 diabetes and diabetic kidney disease",
          "diabetic-kidney-disease outcome-trial population (CREDENCE / FIDELIO-DKD style)", "and"),
    _case(E, "elix-OBESE", "adults with obesity (BMI of 30 or greater) without diabetes",
          "weight-management trial inclusion pattern (STEP 1 style, BMI threshold, diabetes excluded)",
          "qualifiers"),
    _case(E, "elix-DEPRESS", "adult outpatients with major depressive disorder",
          "antidepressant trial title pattern 'in adult outpatients with MDD'", "qualifiers"),
    _case(E, "elix-NEURO_SEIZ", "patients with epilepsy or recurrent seizures",
          "antiseizure-medication trial inclusion pattern joining diagnosis and seizure history with 'or'", "or"),
    _case(E, "elix-LUNG_CHRONIC", "patients with COPD or asthma",
          "inhaled-therapy pragmatic-trial population joining two obstructive airway diseases", "or"),
    _case(E, "elix-DEMENTIA", "community-dwelling older adults with Alzheimer's disease or other dementia",
          "dementia care trial phrasing with a setting qualifier", "or"),
    _case(E, "elix-RENLFL_SEV", "patients with end-stage renal disease on maintenance hemodialysis",
          "dialysis trial inclusion pattern (ESRD on maintenance hemodialysis)", "qualifiers"),
    _case(E, "elix-ALCOHOL", "adults with alcohol use disorder",
          "DSM-5 wording used by alcohol pharmacotherapy trials", "single"),
    _case(E, "elix-THYROID_HYPO", "women with an underactive thyroid",
          "lay wording for hypothyroidism in patient-facing study listings", "lay"),
    _case(E, "elix-PERIVASC", "patients with symptomatic peripheral artery disease",
          "PAD trial inclusion pattern ('symptomatic PAD')", "qualifiers"),
    _case(E, "elix-CBVD", "patients with a recent ischemic stroke or transient ischemic attack",
          "secondary-prevention trial population (stroke or TIA, e.g. POINT / CHANCE style)", "or"),
    _case(E, "elix-VALVE", "patients with severe symptomatic aortic stenosis",
          "transcatheter valve trial inclusion pattern", "qualifiers"),
    _case(E, "elix-PSYCHOSES", "adults with schizophrenia or schizoaffective disorder",
          "antipsychotic trial inclusion pattern", "or"),
    _case(E, "elix-AIDS", "adults living with HIV infection",
          "person-first phrasing used by HIV treatment trials", "lay"),
    _case(E, "elix-HTN_CX", "patients with hypertension and chronic kidney disease",
          "hypertensive-CKD trial population joining two diagnoses with 'and'", "and"),
    _case(E, "elix-CANCER_METS", "patients with metastatic breast cancer",
          "oncology trial title pattern 'in patients with metastatic <site> cancer'", "single"),
    # --- CMS-HCC V28 --------------------------------------------------------------------------
    _case(V28, "v28-HCC38", "Medicare beneficiaries with type 2 diabetes without complications",
          "Medicare claims-study population phrasing", "qualifiers"),
    _case(V28, "v28-HCC226", "older adults with chronic heart failure",
          "geriatric heart-failure study phrasing", "qualifiers"),
    _case(V28, "v28-HCC228", "patients admitted to hospital with a heart attack",
          "lay wording for acute myocardial infarction in patient-facing listings", "lay"),
    _case(V28, "v28-HCC280", "patients with chronic obstructive pulmonary disease or interstitial lung disease",
          "chronic lung disease registry inclusion pattern", "or"),
    _case(V28, "v28-HCC327", "adults with stage 4 chronic kidney disease",
          "CKD trial inclusion by stage (eGFR 15-29) phrasing", "single"),
    _case(V28, "v28-HCC238", "patients with atrial fibrillation or atrial flutter",
          "anticoagulation trial inclusion pattern (ARISTOTLE / ROCKET AF style)", "or"),
    _case(V28, "v28-HCC249", "patients hospitalized with acute ischemic stroke",
          "acute stroke trial inclusion pattern", "qualifiers"),
    _case(V28, "v28-HCC48", "adults with severe obesity (BMI of 40 or higher)",
          "bariatric-surgery study inclusion pattern", "lay"),
    _case(V28, "v28-HCC155", "adults with moderate to severe major depressive disorder",
          "antidepressant trial inclusion by severity", "qualifiers"),
    _case(V28, "v28-HCC93", "adults with active rheumatoid arthritis despite methotrexate",
          "biologic DMARD trial title pattern ('inadequate response to methotrexate')", "qualifiers"),
    _case(V28, "v28-HCC198", "patients with relapsing multiple sclerosis",
          "disease-modifying therapy trial title pattern", "qualifiers"),
    _case(V28, "v28-HCC2", "adults presenting to the emergency department with sepsis or septic shock",
          "sepsis resuscitation trial inclusion pattern (ED presentation)", "or"),
    _case(V28, "v28-HCC267", "patients with acute deep vein thrombosis or pulmonary embolism",
          "venous thromboembolism treatment trial population (DVT or PE)", "or"),
    _case(V28, "v28-HCC80", "adults with moderately to severely active Crohn's disease",
          "IBD biologic trial title pattern", "qualifiers"),
    _case(V28, "v28-HCC64", "patients with compensated liver cirrhosis",
          "hepatology trial inclusion pattern", "qualifiers"),
    _case(V28, "v28-HCC37", "adults with type 2 diabetes and diabetic peripheral neuropathy",
          "painful diabetic neuropathy trial population ('type 2 diabetes and DPN')", "and"),
    # --- CMS-HCC V24 --------------------------------------------------------------------------
    _case(V24, "v24-HCC85", "adults hospitalized for acute decompensated heart failure",
          "acute heart-failure trial inclusion pattern", "qualifiers"),
    _case(V24, "v24-HCC19", "elderly patients with sugar diabetes",
          "lay wording for diabetes mellitus", "lay"),
    _case(V24, "v24-HCC111", "current or former smokers with COPD",
          "COPD trial inclusion pattern with a smoking-history qualifier", "qualifiers"),
    _case(V24, "v24-HCC96", "patients with newly diagnosed atrial fibrillation",
          "early rhythm-control trial population (EAST-AFNET 4 style)", "qualifiers"),
    _case(V24, "v24-HCC59", "patients with bipolar I disorder or major depression",
          "mood-disorder trial inclusion joining two diagnoses", "or"),
    _case(V24, "v24-HCC138", "patients with moderate chronic kidney disease (stage 3)",
          "CKD progression study phrasing", "qualifiers"),
    _case(V24, "v24-HCC100", "survivors of ischemic stroke",
          "stroke rehabilitation study phrasing", "lay"),
    _case(V24, "v24-HCC79", "children and adults with seizures",
          "antiseizure trial phrasing with lay 'seizures'", "lay"),
    _case(V24, "v24-HCC40", "patients with rheumatoid arthritis or systemic lupus erythematosus",
          "inflammatory connective-tissue disease registry inclusion", "or"),
    _case(V24, "v24-HCC18", "patients with type 1 diabetes and diabetic retinopathy",
          "diabetic eye disease study population joining diabetes type and complication", "and"),
    _case(V24, "v24-HCC28", "adults with alcohol-related liver cirrhosis and a history of heavy drinking",
          "alcohol-associated liver disease study phrasing", "and"),
]

_O = "ohdsi"
OHDSI_TEST_CASES: list[DecompositionTestCase] = [
    _case(_O, "503", "adults with type 2 diabetes mellitus",
          'ClinicalTrials.gov NCT03985293, "...in Adults With Type 2 Diabetes Mellitus"', "qualifiers"),
    _case(_O, "40", "patients with type 2 diabetes or a documented history of diabetes",
          "common trial inclusion phrasing combining current diagnosis with history of diabetes", "or"),
    _case(_O, "288", "type 2 diabetes mellitus confirmed by diagnosis, treatment, or laboratory testing",
          "phrasing pattern from diagnosis/treatment/lab-indexed diabetes ascertainment algorithms", "qualifiers"),
    _case(_O, "499", "adult patients with type 1 diabetes mellitus",
          'ClinicalTrials.gov NCT01421147, "A Study in Adults With Type 1 Diabetes"', "qualifiers"),
    _case(_O, "611", "patients presenting to the emergency department with diabetic ketoacidosis",
          "common DKA trial inclusion phrasing (ED presentation with primary DKA diagnosis)", "qualifiers"),
    _case(_O, "619", "pregnant women diagnosed with gestational diabetes mellitus",
          "common GDM trial inclusion phrasing, e.g. ClinicalTrials.gov NCT02244814", "qualifiers"),
    _case(_O, "647", "adults with diabetic retinopathy",
          "common diabetic-retinopathy trial inclusion phrasing", "qualifiers"),
    _case(_O, "687", "patients with chronic kidney disease",
          "common CKD trial inclusion phrasing framed around a CKD diagnosis", "single"),
    _case(_O, "510", "adult patients hospitalized with acute myocardial infarction",
          "common AMI trial phrasing (diagnosis of acute MI, hospitalized within 48h of onset)", "qualifiers"),
    _case(_O, "513", "adults diagnosed with atrial fibrillation",
          "common AF trial inclusion phrasing, e.g. ClinicalTrials.gov NCT04357288", "qualifiers"),
    _case(_O, "519", "adult patients with a diagnosis of heart failure",
          "common heart failure trial inclusion phrasing", "qualifiers"),
    _case(_O, "507", "adults hospitalized with community-acquired pneumonia",
          "common CAP trial inclusion phrasing (radiographic infiltrate plus symptoms)", "qualifiers"),
    _case(_O, "521", "adults with a physician's diagnosis of asthma",
          "common asthma trial inclusion phrasing", "qualifiers"),
    _case(_O, "594", "adult patients with major depressive disorder",
          'ClinicalTrials.gov NCT00795821, "A Study in Adult Patients With Major Depressive Disorder"',
          "qualifiers"),
    _case(_O, "602", "adults with generalized anxiety disorder",
          "common GAD trial inclusion phrasing, e.g. ClinicalTrials.gov NCT03829241", "qualifiers"),
    _case(_O, "457", "adult patients with a diagnosis of rheumatoid arthritis",
          "common RA trial inclusion phrasing (ACR/EULAR 2010 classification criteria)", "qualifiers"),
    _case(_O, "549", "adults with a diagnosis of epilepsy",
          "common epilepsy trial inclusion phrasing", "qualifiers"),
    _case(_O, "524", "adults with a history of migraine",
          "common migraine trial inclusion phrasing (ICHD-3 diagnostic criteria)", "qualifiers"),
    _case(_O, "463", "adult patients presenting to the emergency department with suspected sepsis",
          "common sepsis trial inclusion phrasing (ED presentation, suspected infection)", "qualifiers"),
    _case(_O, "775", "adults with a new diagnosis of inflammatory bowel disease",
          "common IBD trial inclusion phrasing (Crohn's disease or ulcerative colitis)", "qualifiers"),
    _case(_O, "626", "adult patients with a diagnosis of liver cirrhosis",
          "common cirrhosis trial inclusion phrasing", "qualifiers"),
    _case(_O, "558", "adults with a diagnosis of hyperlipidemia",
          "common hyperlipidemia/dyslipidemia trial inclusion phrasing", "qualifiers"),
    _case(_O, "563", "adults with obesity",
          "common obesity trial inclusion phrasing (BMI-based eligibility)", "qualifiers"),
]

CASE_SETS: dict[str, list[DecompositionTestCase]] = {"default": DEFAULT_TEST_CASES, "ohdsi": OHDSI_TEST_CASES}


def _libraries_for(
    library_dir: Path, broken: list[str] | None = None
) -> tuple[dict[str, Library], Library | None]:
    """``(libraries by directory name, the single library when library_dir is one)``; a broken library
    in a folder of libraries is skipped and its error appended to ``broken``."""
    library_dir = Path(library_dir)
    if (library_dir / "manifest.json").is_file():
        single = load_library(library_dir)
        return {library_dir.name: single}, single
    errors = broken if broken is not None else []
    return {library.path.name: library for library in list_libraries(library_dir, errors=errors)}, None


def _pick_library(case: DecompositionTestCase, by_name: dict[str, Library], single: Library | None) -> Library | None:
    library = by_name.get(case.library_id)
    if library is None:
        library = next((lib for lib in by_name.values() if lib.library_id.startswith(case.library_id)), None)
    if library is None and single is not None:
        library = single  # a single library given explicitly: run any case whose cohort it holds
    if library is None or case.cohort_id not in library.cohort_ids:
        return None
    return library


def _resolutions(con: duckdb.DuckDBPyConnection, state, target: str) -> list[TermResolution]:
    out: list[TermResolution] = []
    for term in state.terms:
        if term.status == "curated" and term.curated is not None:
            match = term.curated
            out.append(TermResolution(
                term=term.term, landed="target" if match.cohort_id == target else "other",
                matched_cohort_ids=[match.cohort_id], matched_cohort_names=[match.cohort_name], tier="curated",
                codes=nodes.cohort_codes(con, match.library_path, match.cohort_id),
                retrieval_overlap=match.retrieval_overlap, name_overlap=match.name_overlap, note=term.note,
            ))
        elif term.status == "ambiguous":
            out.append(TermResolution(
                term=term.term, landed="ambiguous", tier="generated", codes=term.candidate_codes,
                matched_cohort_ids=[m.cohort_id for m in term.ambiguous],
                matched_cohort_names=[m.cohort_name for m in term.ambiguous], note=term.note,
            ))
        else:
            out.append(TermResolution(
                term=term.term, landed="none", tier="generated", codes=term.candidate_codes,
                note=term.search_reason,
            ))
    return out


def retrieval_label(dense: DenseRetriever | None) -> str:
    return "hybrid (BM25 + dense, RRF)" if dense is not None else "hybrid, BM25 only (no dense index)"


def score_decomposition(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    decompose_fn: Callable[[str], list[str]],
    dense: DenseRetriever | None = None,
    k: int = 10,
    fanout_threshold: int = 100,
    test_cases: list[DecompositionTestCase] | None = None,
    progress: ProgressCallback | None = None,
) -> DecompositionReport:
    """Score ``decompose_fn`` against each test case's curated ground truth.

    ``library_dir`` is one library (every case whose cohort it holds runs) or a folder of
    libraries (each case runs against the library named by its ``library_id``). Cases whose
    library or cohort is missing are listed in ``skipped``; a decomposer failure is recorded on
    the case (``error``) and left out of the means.
    """
    cases = test_cases if test_cases is not None else DEFAULT_TEST_CASES
    broken: list[str] = []
    by_name, single = _libraries_for(Path(library_dir), broken)
    results: list[DecompositionCaseResult] = []
    skipped: list[str] = [f"broken library skipped: {problem}" for problem in broken]
    landed: Counter[str] = Counter()
    for index, case in enumerate(cases):
        if progress is not None:
            progress(index, len(cases), f"{case.cohort_id}: {case.population_description[:60]}")
        library = _pick_library(case, by_name, single)
        if library is None:
            skipped.append(f"{case.cohort_id}: library {case.library_id!r} or its cohort is not installed")
            continue
        truth = load_curated_concept_set(con, library.path, case.cohort_id, fanout_threshold)
        baseline_codes = hybrid_search(con, truth.cohort_name, k=k, dense=dense).codes
        baseline = score_cohort(con, case.cohort_id, truth.cohort_name, truth.codes, baseline_codes, "baseline")
        common = {"cohort_id": case.cohort_id, "cohort_name": truth.cohort_name,
                  "population_description": case.population_description, "library_id": library.library_id,
                  "source": case.source, "baseline_hierarchical_score": baseline.hierarchical_score,
                  "baseline_coverage": baseline.coverage, "baseline_over_inclusion": baseline.over_inclusion_penalty,
                  "n_ground_truth": len(truth.codes)}
        try:
            state = nodes.run_ungated(con, case.population_description, decompose_fn, [library], dense=dense,
                                      k=k, fanout_threshold=fanout_threshold)
        except PhenoforgeError as error:
            results.append(DecompositionCaseResult(
                **common, seed_terms=[], decomposed_hierarchical_score=0.0, gap=0.0, error=str(error)))
            continue
        predicted = state.concept_set.codes if state.concept_set else []
        scored = score_cohort(con, case.cohort_id, truth.cohort_name, truth.codes, predicted, "decomposed")
        resolutions = _resolutions(con, state, case.cohort_id)
        landed.update(resolution.landed for resolution in resolutions)
        results.append(DecompositionCaseResult(
            **common,
            seed_terms=[term.term for term in state.terms],
            decomposed_hierarchical_score=scored.hierarchical_score,
            decomposed_coverage=scored.coverage,
            decomposed_over_inclusion=scored.over_inclusion_penalty,
            gap=baseline.hierarchical_score - scored.hierarchical_score,
            term_resolutions=resolutions,
            predicted_codes=predicted,
        ))
    if progress is not None:
        progress(len(cases), len(cases), "done")
    ok = [result for result in results if result.error is None]
    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    return DecompositionReport(
        results=results,
        mean_gap=mean([r.gap for r in ok]),
        mean_baseline_hierarchical_score=mean([r.baseline_hierarchical_score for r in ok]),
        mean_decomposed_hierarchical_score=mean([r.decomposed_hierarchical_score for r in ok]),
        n_scored=len(ok),
        decomposer=getattr(decompose_fn, "__name__", None) or repr(decompose_fn),
        retrieval=retrieval_label(dense),
        k=k,
        landed_counts=dict(landed),
        skipped=skipped,
    )


class CaseSpread(BaseModel):
    cohort_id: str
    population_description: str
    gaps: list[float]
    mean_gap: float
    min_gap: float
    max_gap: float
    stdev_gap: float
    distinct_term_sets: list[list[str]]
    n_errors: int = 0


class RepeatReport(BaseModel):
    """``n`` runs of the same cases: how much an LLM decomposer's answers (and scores) vary."""

    n: int
    mean_gap_per_run: list[float]
    mean_gap: float
    stdev_mean_gap: float
    cases: list[CaseSpread]
    runs: list[DecompositionReport] = Field(default_factory=list)


def repeat_decomposition(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    decompose_fn: Callable[[str], list[str]],
    n: int,
    dense: DenseRetriever | None = None,
    k: int = 10,
    fanout_threshold: int = 100,
    test_cases: list[DecompositionTestCase] | None = None,
    progress: ProgressCallback | None = None,
) -> RepeatReport:
    """Run ``score_decomposition`` ``n`` times; pass an uncached decomposer or every run is equal."""
    if n < 1:
        raise ValueError("n must be at least 1")
    runs: list[DecompositionReport] = []
    for run in range(n):
        inner: ProgressCallback | None = None
        if progress is not None:
            def inner(done: int, total: int, message: str, run: int = run) -> None:
                progress(run * total + done, n * total, f"run {run + 1}/{n}: {message}")
        runs.append(score_decomposition(con, library_dir, decompose_fn, dense=dense, k=k,
                                        fanout_threshold=fanout_threshold, test_cases=test_cases, progress=inner))
    cases: list[CaseSpread] = []
    for index, first in enumerate(runs[0].results):
        per_run = [run.results[index] for run in runs]
        gaps = [r.gap for r in per_run if r.error is None]
        sets: list[list[str]] = []
        for r in per_run:
            if r.error is None and r.seed_terms not in sets:
                sets.append(r.seed_terms)
        cases.append(CaseSpread(
            cohort_id=first.cohort_id, population_description=first.population_description, gaps=gaps,
            mean_gap=statistics.fmean(gaps) if gaps else 0.0, min_gap=min(gaps, default=0.0),
            max_gap=max(gaps, default=0.0), stdev_gap=statistics.pstdev(gaps) if len(gaps) > 1 else 0.0,
            distinct_term_sets=sets, n_errors=sum(1 for r in per_run if r.error is not None),
        ))
    per_run_means = [run.mean_gap for run in runs]
    return RepeatReport(
        n=n, mean_gap_per_run=per_run_means, mean_gap=statistics.fmean(per_run_means),
        stdev_mean_gap=statistics.pstdev(per_run_means) if n > 1 else 0.0, cases=cases, runs=runs,
    )

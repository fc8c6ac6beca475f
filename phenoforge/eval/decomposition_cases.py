"""Held-out decomposition cases phrased the way trial eligibility criteria are (``split="new"``).

Written before the vocabulary-grounded decomposer was tuned, and never looked at case by case
while changing it: they are reported, not tuned on. Each carries the qualifier class it exercises
(``pattern``: medication, setting, lab, staging, time, lay) and a ``source`` note naming the
eligibility-criteria pattern it follows. Patterns are paraphrased from the way ClinicalTrials.gov
inclusion criteria are commonly written for each condition, not copied from one registration.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Split = Literal["dev", "test", "new"]


class DecompositionTestCase(BaseModel):
    """A free-text population description mapped to the cohort it should resolve to."""

    population_description: str = Field(description="phrased like a real study population, not the cohort name")
    cohort_id: str
    source: str = Field(description="where the phrasing pattern came from; documentation only")
    library_id: str = Field(
        default="ohdsi",
        description="library directory the cohort belongs to: elixhauser, cms-hcc-v28, cms-hcc-v24, ohdsi",
    )
    pattern: str = Field(default="single", description="single, and, or, qualifiers, lay, medication, setting, ...")
    split: Split = Field(
        default="test", description="dev: looked at while changing a decomposer; test/new: reported only"
    )


def _case(library: str, cohort: str, description: str, source: str, pattern: str) -> DecompositionTestCase:
    return DecompositionTestCase(
        population_description=description, cohort_id=cohort, source=source, library_id=library, pattern=pattern
    )


E, V28, V24 = "elixhauser", "cms-hcc-v28", "cms-hcc-v24"

DEFAULT_TEST_CASES: list[DecompositionTestCase] = [
    # --- Elixhauser ---------------------------------------------------------------------------
    _case(
        E,
        "elix-HF",
        "patients hospitalized for heart failure with reduced ejection fraction",
        "HFrEF outcome-trial population phrasing (DAPA-HF / PARADIGM-HF style), hospitalisation qualifier",
        "qualifiers",
    ),
    _case(
        E,
        "elix-HTN_UNCX",
        "adults with high blood pressure",
        "lay-summary phrasing used in plain-language trial summaries (e.g. SPRINT)",
        "lay",
    ),
    _case(
        E,
        "elix-DIAB_UNCX",
        "adults with type 2 diabetes inadequately controlled on metformin",
        "phase 3 glucose-lowering trial title pattern '... inadequately controlled on metformin'",
        "qualifiers",
    ),
    _case(
        E,
        "elix-DIAB_CX",
        "patients with type 2 diabetes and diabetic kidney disease",
        "diabetic-kidney-disease outcome-trial population (CREDENCE / FIDELIO-DKD style)",
        "and",
    ),
    _case(
        E,
        "elix-OBESE",
        "adults with obesity (BMI of 30 or greater) without diabetes",
        "weight-management trial inclusion pattern (STEP 1 style, BMI threshold, diabetes excluded)",
        "qualifiers",
    ),
    _case(
        E,
        "elix-DEPRESS",
        "adult outpatients with major depressive disorder",
        "antidepressant trial title pattern 'in adult outpatients with MDD'",
        "qualifiers",
    ),
    _case(
        E,
        "elix-NEURO_SEIZ",
        "patients with epilepsy or recurrent seizures",
        "antiseizure-medication trial inclusion pattern joining diagnosis and seizure history with 'or'",
        "or",
    ),
    _case(
        E,
        "elix-LUNG_CHRONIC",
        "patients with COPD or asthma",
        "inhaled-therapy pragmatic-trial population joining two obstructive airway diseases",
        "or",
    ),
    _case(
        E,
        "elix-DEMENTIA",
        "community-dwelling older adults with Alzheimer's disease or other dementia",
        "dementia care trial phrasing with a setting qualifier",
        "or",
    ),
    _case(
        E,
        "elix-RENLFL_SEV",
        "patients with end-stage renal disease on maintenance hemodialysis",
        "dialysis trial inclusion pattern (ESRD on maintenance hemodialysis)",
        "qualifiers",
    ),
    _case(
        E,
        "elix-ALCOHOL",
        "adults with alcohol use disorder",
        "DSM-5 wording used by alcohol pharmacotherapy trials",
        "single",
    ),
    _case(
        E,
        "elix-THYROID_HYPO",
        "women with an underactive thyroid",
        "lay wording for hypothyroidism in patient-facing study listings",
        "lay",
    ),
    _case(
        E,
        "elix-PERIVASC",
        "patients with symptomatic peripheral artery disease",
        "PAD trial inclusion pattern ('symptomatic PAD')",
        "qualifiers",
    ),
    _case(
        E,
        "elix-CBVD",
        "patients with a recent ischemic stroke or transient ischemic attack",
        "secondary-prevention trial population (stroke or TIA, e.g. POINT / CHANCE style)",
        "or",
    ),
    _case(
        E,
        "elix-VALVE",
        "patients with severe symptomatic aortic stenosis",
        "transcatheter valve trial inclusion pattern",
        "qualifiers",
    ),
    _case(
        E,
        "elix-PSYCHOSES",
        "adults with schizophrenia or schizoaffective disorder",
        "antipsychotic trial inclusion pattern",
        "or",
    ),
    _case(
        E, "elix-AIDS", "adults living with HIV infection", "person-first phrasing used by HIV treatment trials", "lay"
    ),
    _case(
        E,
        "elix-HTN_CX",
        "patients with hypertension and chronic kidney disease",
        "hypertensive-CKD trial population joining two diagnoses with 'and'",
        "and",
    ),
    _case(
        E,
        "elix-CANCER_METS",
        "patients with metastatic breast cancer",
        "oncology trial title pattern 'in patients with metastatic <site> cancer'",
        "single",
    ),
    # --- CMS-HCC V28 --------------------------------------------------------------------------
    _case(
        V28,
        "v28-HCC38",
        "Medicare beneficiaries with type 2 diabetes without complications",
        "Medicare claims-study population phrasing",
        "qualifiers",
    ),
    _case(
        V28,
        "v28-HCC226",
        "older adults with chronic heart failure",
        "geriatric heart-failure study phrasing",
        "qualifiers",
    ),
    _case(
        V28,
        "v28-HCC228",
        "patients admitted to hospital with a heart attack",
        "lay wording for acute myocardial infarction in patient-facing listings",
        "lay",
    ),
    _case(
        V28,
        "v28-HCC280",
        "patients with chronic obstructive pulmonary disease or interstitial lung disease",
        "chronic lung disease registry inclusion pattern",
        "or",
    ),
    _case(
        V28,
        "v28-HCC327",
        "adults with stage 4 chronic kidney disease",
        "CKD trial inclusion by stage (eGFR 15-29) phrasing",
        "single",
    ),
    _case(
        V28,
        "v28-HCC238",
        "patients with atrial fibrillation or atrial flutter",
        "anticoagulation trial inclusion pattern (ARISTOTLE / ROCKET AF style)",
        "or",
    ),
    _case(
        V28,
        "v28-HCC249",
        "patients hospitalized with acute ischemic stroke",
        "acute stroke trial inclusion pattern",
        "qualifiers",
    ),
    _case(
        V28,
        "v28-HCC48",
        "adults with severe obesity (BMI of 40 or higher)",
        "bariatric-surgery study inclusion pattern",
        "lay",
    ),
    _case(
        V28,
        "v28-HCC155",
        "adults with moderate to severe major depressive disorder",
        "antidepressant trial inclusion by severity",
        "qualifiers",
    ),
    _case(
        V28,
        "v28-HCC93",
        "adults with active rheumatoid arthritis despite methotrexate",
        "biologic DMARD trial title pattern ('inadequate response to methotrexate')",
        "qualifiers",
    ),
    _case(
        V28,
        "v28-HCC198",
        "patients with relapsing multiple sclerosis",
        "disease-modifying therapy trial title pattern",
        "qualifiers",
    ),
    _case(
        V28,
        "v28-HCC2",
        "adults presenting to the emergency department with sepsis or septic shock",
        "sepsis resuscitation trial inclusion pattern (ED presentation)",
        "or",
    ),
    _case(
        V28,
        "v28-HCC267",
        "patients with acute deep vein thrombosis or pulmonary embolism",
        "venous thromboembolism treatment trial population (DVT or PE)",
        "or",
    ),
    _case(
        V28,
        "v28-HCC80",
        "adults with moderately to severely active Crohn's disease",
        "IBD biologic trial title pattern",
        "qualifiers",
    ),
    _case(
        V28,
        "v28-HCC64",
        "patients with compensated liver cirrhosis",
        "hepatology trial inclusion pattern",
        "qualifiers",
    ),
    _case(
        V28,
        "v28-HCC37",
        "adults with type 2 diabetes and diabetic peripheral neuropathy",
        "painful diabetic neuropathy trial population ('type 2 diabetes and DPN')",
        "and",
    ),
    # --- CMS-HCC V24 --------------------------------------------------------------------------
    _case(
        V24,
        "v24-HCC85",
        "adults hospitalized for acute decompensated heart failure",
        "acute heart-failure trial inclusion pattern",
        "qualifiers",
    ),
    _case(V24, "v24-HCC19", "elderly patients with sugar diabetes", "lay wording for diabetes mellitus", "lay"),
    _case(
        V24,
        "v24-HCC111",
        "current or former smokers with COPD",
        "COPD trial inclusion pattern with a smoking-history qualifier",
        "qualifiers",
    ),
    _case(
        V24,
        "v24-HCC96",
        "patients with newly diagnosed atrial fibrillation",
        "early rhythm-control trial population (EAST-AFNET 4 style)",
        "qualifiers",
    ),
    _case(
        V24,
        "v24-HCC59",
        "patients with bipolar I disorder or major depression",
        "mood-disorder trial inclusion joining two diagnoses",
        "or",
    ),
    _case(
        V24,
        "v24-HCC138",
        "patients with moderate chronic kidney disease (stage 3)",
        "CKD progression study phrasing",
        "qualifiers",
    ),
    _case(V24, "v24-HCC100", "survivors of ischemic stroke", "stroke rehabilitation study phrasing", "lay"),
    _case(
        V24, "v24-HCC79", "children and adults with seizures", "antiseizure trial phrasing with lay 'seizures'", "lay"
    ),
    _case(
        V24,
        "v24-HCC40",
        "patients with rheumatoid arthritis or systemic lupus erythematosus",
        "inflammatory connective-tissue disease registry inclusion",
        "or",
    ),
    _case(
        V24,
        "v24-HCC18",
        "patients with type 1 diabetes and diabetic retinopathy",
        "diabetic eye disease study population joining diabetes type and complication",
        "and",
    ),
    _case(
        V24,
        "v24-HCC28",
        "adults with alcohol-related liver cirrhosis and a history of heavy drinking",
        "alcohol-associated liver disease study phrasing",
        "and",
    ),
]


def _split_alternately(cases: list[DecompositionTestCase]) -> list[DecompositionTestCase]:
    """Every other case (in list order, which groups cases by library) is development, the rest test.

    Declared once, before the vocabulary-grounded decomposer was written, and never rearranged
    after seeing results: development cases are what a decomposer change may be checked on; the
    test half is only reported.
    """
    return [case.model_copy(update={"split": "dev" if index % 2 == 0 else "test"}) for index, case in enumerate(cases)]


DEFAULT_TEST_CASES = _split_alternately(DEFAULT_TEST_CASES)

_O = "ohdsi"
OHDSI_TEST_CASES: list[DecompositionTestCase] = [
    _case(
        _O,
        "503",
        "adults with type 2 diabetes mellitus",
        'ClinicalTrials.gov NCT03985293, "...in Adults With Type 2 Diabetes Mellitus"',
        "qualifiers",
    ),
    _case(
        _O,
        "40",
        "patients with type 2 diabetes or a documented history of diabetes",
        "common trial inclusion phrasing combining current diagnosis with history of diabetes",
        "or",
    ),
    _case(
        _O,
        "288",
        "type 2 diabetes mellitus confirmed by diagnosis, treatment, or laboratory testing",
        "phrasing pattern from diagnosis/treatment/lab-indexed diabetes ascertainment algorithms",
        "qualifiers",
    ),
    _case(
        _O,
        "499",
        "adult patients with type 1 diabetes mellitus",
        'ClinicalTrials.gov NCT01421147, "A Study in Adults With Type 1 Diabetes"',
        "qualifiers",
    ),
    _case(
        _O,
        "611",
        "patients presenting to the emergency department with diabetic ketoacidosis",
        "common DKA trial inclusion phrasing (ED presentation with primary DKA diagnosis)",
        "qualifiers",
    ),
    _case(
        _O,
        "619",
        "pregnant women diagnosed with gestational diabetes mellitus",
        "common GDM trial inclusion phrasing, e.g. ClinicalTrials.gov NCT02244814",
        "qualifiers",
    ),
    _case(
        _O,
        "647",
        "adults with diabetic retinopathy",
        "common diabetic-retinopathy trial inclusion phrasing",
        "qualifiers",
    ),
    _case(
        _O,
        "687",
        "patients with chronic kidney disease",
        "common CKD trial inclusion phrasing framed around a CKD diagnosis",
        "single",
    ),
    _case(
        _O,
        "510",
        "adult patients hospitalized with acute myocardial infarction",
        "common AMI trial phrasing (diagnosis of acute MI, hospitalized within 48h of onset)",
        "qualifiers",
    ),
    _case(
        _O,
        "513",
        "adults diagnosed with atrial fibrillation",
        "common AF trial inclusion phrasing, e.g. ClinicalTrials.gov NCT04357288",
        "qualifiers",
    ),
    _case(
        _O,
        "519",
        "adult patients with a diagnosis of heart failure",
        "common heart failure trial inclusion phrasing",
        "qualifiers",
    ),
    _case(
        _O,
        "507",
        "adults hospitalized with community-acquired pneumonia",
        "common CAP trial inclusion phrasing (radiographic infiltrate plus symptoms)",
        "qualifiers",
    ),
    _case(
        _O,
        "521",
        "adults with a physician's diagnosis of asthma",
        "common asthma trial inclusion phrasing",
        "qualifiers",
    ),
    _case(
        _O,
        "594",
        "adult patients with major depressive disorder",
        'ClinicalTrials.gov NCT00795821, "A Study in Adult Patients With Major Depressive Disorder"',
        "qualifiers",
    ),
    _case(
        _O,
        "602",
        "adults with generalized anxiety disorder",
        "common GAD trial inclusion phrasing, e.g. ClinicalTrials.gov NCT03829241",
        "qualifiers",
    ),
    _case(
        _O,
        "457",
        "adult patients with a diagnosis of rheumatoid arthritis",
        "common RA trial inclusion phrasing (ACR/EULAR 2010 classification criteria)",
        "qualifiers",
    ),
    _case(_O, "549", "adults with a diagnosis of epilepsy", "common epilepsy trial inclusion phrasing", "qualifiers"),
    _case(
        _O,
        "524",
        "adults with a history of migraine",
        "common migraine trial inclusion phrasing (ICHD-3 diagnostic criteria)",
        "qualifiers",
    ),
    _case(
        _O,
        "463",
        "adult patients presenting to the emergency department with suspected sepsis",
        "common sepsis trial inclusion phrasing (ED presentation, suspected infection)",
        "qualifiers",
    ),
    _case(
        _O,
        "775",
        "adults with a new diagnosis of inflammatory bowel disease",
        "common IBD trial inclusion phrasing (Crohn's disease or ulcerative colitis)",
        "qualifiers",
    ),
    _case(
        _O,
        "626",
        "adult patients with a diagnosis of liver cirrhosis",
        "common cirrhosis trial inclusion phrasing",
        "qualifiers",
    ),
    _case(
        _O,
        "558",
        "adults with a diagnosis of hyperlipidemia",
        "common hyperlipidemia/dyslipidemia trial inclusion phrasing",
        "qualifiers",
    ),
    _case(
        _O,
        "563",
        "adults with obesity",
        "common obesity trial inclusion phrasing (BMI-based eligibility)",
        "qualifiers",
    ),
]


def _new(library: str, cohort: str, description: str, source: str, pattern: str) -> DecompositionTestCase:
    return DecompositionTestCase(
        population_description=description,
        cohort_id=cohort,
        source=source,
        library_id=library,
        pattern=pattern,
        split="new",
    )


NEW_TEST_CASES: list[DecompositionTestCase] = [
    # --- Elixhauser ---------------------------------------------------------------------------
    _new(
        E,
        "elix-HF",
        "patients with chronic heart failure (NYHA class II-IV) on guideline-directed medical therapy "
        "including a beta-blocker",
        "HF outcome-trial inclusion: NYHA class range plus background-therapy clause",
        "medication",
    ),
    _new(
        E,
        "elix-HTN_UNCX",
        "adults with essential hypertension taking two or more antihypertensive medications",
        "resistant-hypertension trial inclusion: number of background antihypertensives",
        "medication",
    ),
    _new(
        E,
        "elix-DIAB_UNCX",
        "adults with type 2 diabetes and an HbA1c between 7.0% and 10.5% on a stable dose of "
        "metformin for at least 3 months",
        "glucose-lowering add-on trial inclusion: HbA1c window, stable metformin",
        "lab",
    ),
    _new(
        E,
        "elix-DIAB_CX",
        "patients with a diabetic foot ulcer below the ankle present for at least 4 weeks",
        "diabetic-foot-ulcer wound-healing trial inclusion: ulcer site and duration",
        "time",
    ),
    _new(
        E,
        "elix-DEPRESS",
        "outpatients with a current major depressive episode and a HAM-D total score of 20 or more",
        "antidepressant trial inclusion: DSM episode plus rating-scale threshold",
        "lab",
    ),
    _new(
        E,
        "elix-NEURO_SEIZ",
        "patients with focal-onset seizures uncontrolled despite two or more antiseizure medications",
        "adjunctive antiseizure-drug trial inclusion: drug-resistant focal seizures",
        "medication",
    ),
    _new(
        E,
        "elix-LUNG_CHRONIC",
        "adults with persistent asthma using inhaled steroids for at least 12 weeks",
        "asthma add-on trial inclusion: background inhaled corticosteroid for a minimum duration",
        "medication",
    ),
    _new(
        E,
        "elix-DEMENTIA",
        "residents of long-term care facilities with probable Alzheimer's disease and a Mini-Mental "
        "State Examination score of 10 to 24",
        "dementia trial inclusion: NIA-AA probable AD plus MMSE window",
        "setting",
    ),
    _new(
        E,
        "elix-RENLFL_SEV",
        "patients with kidney failure receiving dialysis three times weekly for at least 90 days",
        "dialysis-population trial inclusion: maintenance dialysis schedule and vintage",
        "lay",
    ),
    _new(
        E,
        "elix-ALCOHOL",
        "heavy drinkers meeting DSM-5 criteria for alcohol use disorder who want to reduce their drinking",
        "alcohol pharmacotherapy trial inclusion: DSM-5 AUD plus treatment goal",
        "lay",
    ),
    _new(
        E,
        "elix-THYROID_HYPO",
        "women with an underactive thyroid gland on levothyroxine replacement",
        "thyroid-replacement study inclusion with lay wording and the replacement drug",
        "lay",
    ),
    _new(
        E,
        "elix-PERIVASC",
        "patients with intermittent claudication due to peripheral artery disease and an "
        "ankle-brachial index of 0.90 or less",
        "PAD trial inclusion: symptom plus ABI threshold",
        "lab",
    ),
    _new(
        E,
        "elix-CBVD",
        "patients with a transient ischemic attack within the previous 7 days",
        "secondary-prevention trial inclusion: qualifying event time window",
        "time",
    ),
    _new(
        E,
        "elix-VALVE",
        "patients with severe mitral regurgitation referred for transcatheter repair",
        "transcatheter mitral repair trial inclusion: severity plus procedure referral",
        "setting",
    ),
    _new(
        E,
        "elix-PSYCHOSES",
        "adults with an acute exacerbation of schizophrenia requiring hospitalization",
        "acute antipsychotic trial inclusion: exacerbation and inpatient setting",
        "setting",
    ),
    _new(
        E,
        "elix-AIDS",
        "people living with HIV with a CD4 count below 200 cells/mm3",
        "HIV treatment trial inclusion: CD4 threshold",
        "lab",
    ),
    _new(
        E,
        "elix-CANCER_METS",
        "patients with colorectal cancer that has spread to the liver",
        "oncology trial inclusion in plain-language summary wording (metastatic to the liver)",
        "lay",
    ),
    _new(
        E,
        "elix-OBESE",
        "adults with a body mass index of 30 kg/m2 or higher referred to a lifestyle weight-loss programme",
        "weight-management trial inclusion: BMI threshold plus referral setting",
        "lab",
    ),
    _new(
        E,
        "elix-PULMCIRC",
        "patients with pulmonary arterial hypertension (WHO Group 1) on a stable dose of an "
        "endothelin receptor antagonist",
        "PAH add-on trial inclusion: WHO group and background therapy",
        "medication",
    ),
    _new(
        E,
        "elix-ULCER_PEPTIC",
        "patients with upper gastrointestinal bleeding from a peptic ulcer after endoscopic hemostasis",
        "ulcer-rebleeding trial inclusion: bleeding source and procedure",
        "setting",
    ),
    _new(
        E,
        "elix-HTN_CX",
        "patients with hypertensive heart disease and left ventricular hypertrophy on echocardiography",
        "hypertensive heart disease study inclusion: imaging-confirmed LVH",
        "setting",
    ),
    _new(
        E,
        "elix-DRUG_ABUSE",
        "adults with opioid use disorder receiving buprenorphine maintenance treatment",
        "opioid-use-disorder trial inclusion: maintenance medication",
        "medication",
    ),
    # --- CMS-HCC V28 --------------------------------------------------------------------------
    _new(
        V28,
        "v28-HCC226",
        "outpatients with heart failure and a left ventricular ejection fraction of 40% or less",
        "HFrEF trial inclusion: LVEF threshold",
        "lab",
    ),
    _new(
        V28,
        "v28-HCC228",
        "patients within 72 hours of a heart attack treated with primary PCI",
        "post-MI trial inclusion: time window and reperfusion procedure, lay wording",
        "time",
    ),
    _new(
        V28,
        "v28-HCC327",
        "patients with chronic kidney disease stage 4 (eGFR 15 to 29 mL/min/1.73 m2) not yet on dialysis",
        "advanced-CKD trial inclusion: stage with eGFR range, dialysis excluded",
        "staging",
    ),
    _new(
        V28,
        "v28-HCC328",
        "adults with CKD stage 3b and an eGFR between 30 and 44",
        "CKD trial inclusion by substage",
        "staging",
    ),
    _new(
        V28,
        "v28-HCC238",
        "patients with paroxysmal or persistent atrial fibrillation scheduled for catheter ablation",
        "AF ablation trial inclusion: AF pattern plus scheduled procedure",
        "setting",
    ),
    _new(
        V28,
        "v28-HCC249",
        "patients with acute ischaemic stroke treated with intravenous thrombolysis within 4.5 hours of symptom onset",
        "acute stroke trial inclusion: British spelling, treatment and time window",
        "time",
    ),
    _new(
        V28,
        "v28-HCC48",
        "adults with class III obesity (BMI 40 or above) scheduled for bariatric surgery",
        "bariatric-surgery study inclusion: obesity class and planned procedure",
        "staging",
    ),
    _new(
        V28,
        "v28-HCC155",
        "adults with severe depression not responding to at least two antidepressants",
        "treatment-resistant depression trial inclusion",
        "medication",
    ),
    _new(
        V28,
        "v28-HCC93",
        "patients with rheumatoid arthritis on stable methotrexate with at least 6 swollen joints",
        "RA biologic trial inclusion: background methotrexate and joint count",
        "medication",
    ),
    _new(
        V28,
        "v28-HCC198",
        "patients with relapsing-remitting MS with at least one relapse in the previous year",
        "MS disease-modifying therapy trial inclusion: relapse in a time window",
        "time",
    ),
    _new(
        V28,
        "v28-HCC2",
        "adults admitted to the ICU with septic shock requiring vasopressors",
        "septic-shock trial inclusion: ICU setting and vasopressor requirement",
        "setting",
    ),
    _new(
        V28,
        "v28-HCC267",
        "patients with a blood clot in the lungs confirmed by CT pulmonary angiography",
        "PE treatment trial inclusion in lay wording with the confirming test",
        "lay",
    ),
    _new(
        V28,
        "v28-HCC80",
        "adults with Crohn's disease who failed anti-TNF therapy",
        "IBD biologic trial inclusion: prior biologic failure",
        "medication",
    ),
    _new(
        V28,
        "v28-HCC81",
        "patients with moderately to severely active ulcerative colitis with a Mayo score of 6 to 12",
        "UC trial inclusion: activity score window",
        "lab",
    ),
    _new(
        V28,
        "v28-HCC279",
        "patients with severe persistent asthma on high-dose inhaled steroids plus a long-acting beta-agonist",
        "severe-asthma biologic trial inclusion: background controller therapy",
        "medication",
    ),
    _new(
        V28,
        "v28-HCC37",
        "adults with type 2 diabetes and diabetic nephropathy with a urine albumin-to-creatinine "
        "ratio of 300 mg/g or more",
        "diabetic kidney disease trial inclusion: albuminuria threshold",
        "lab",
    ),
    _new(
        V28,
        "v28-HCC201",
        "patients with drug-resistant epilepsy referred for epilepsy surgery evaluation",
        "epilepsy surgery study inclusion: drug resistance and referral",
        "setting",
    ),
    _new(
        V28,
        "v28-HCC199",
        "patients with idiopathic Parkinson's disease (Hoehn and Yahr stage 2 to 3) on levodopa",
        "Parkinson's trial inclusion: H&Y stage and background levodopa",
        "staging",
    ),
    _new(
        V28,
        "v28-HCC36",
        "patients admitted with diabetic ketoacidosis and a blood glucose above 250 mg/dL",
        "DKA management trial inclusion: admission plus glucose threshold",
        "lab",
    ),
    _new(
        V28,
        "v28-HCC139",
        "adults with severe alcohol use disorder admitted for medically supervised withdrawal",
        "alcohol withdrawal study inclusion: severity and inpatient detoxification",
        "setting",
    ),
    _new(
        V28,
        "v28-HCC402",
        "older adults with a fragility hip fracture undergoing surgical repair within 48 hours",
        "hip-fracture surgery trial inclusion: fracture type, procedure and time window",
        "time",
    ),
    _new(
        V28,
        "v28-HCC20",
        "patients with advanced non-small cell lung cancer previously treated with platinum-based chemotherapy",
        "second-line NSCLC trial inclusion: prior platinum chemotherapy",
        "medication",
    ),
    # --- CMS-HCC V24 --------------------------------------------------------------------------
    _new(
        V24,
        "v24-HCC86",
        "patients presenting within 12 hours of ST-elevation myocardial infarction",
        "STEMI reperfusion trial inclusion: symptom-onset window",
        "time",
    ),
    _new(
        V24,
        "v24-HCC19",
        "adults with insulin-dependent diabetes",
        "dated wording (IDDM) still used in older registries and patient-facing listings",
        "lay",
    ),
    _new(
        V24,
        "v24-HCC111",
        "patients with emphysema or chronic bronchitis with at least one exacerbation in the last year",
        "COPD exacerbation trial inclusion: phenotype words plus exacerbation history",
        "time",
    ),
    _new(
        V24,
        "v24-HCC114",
        "nursing home residents with aspiration pneumonia treated with intravenous antibiotics",
        "pneumonia treatment study inclusion: long-term-care setting and IV therapy",
        "setting",
    ),
    _new(
        V24,
        "v24-HCC135",
        "hospitalized patients with acute kidney injury (KDIGO stage 2 or 3)",
        "AKI trial inclusion: KDIGO stage",
        "staging",
    ),
    _new(
        V24,
        "v24-HCC57",
        "adults with treatment-resistant schizophrenia starting clozapine",
        "clozapine study inclusion: treatment resistance and drug start",
        "medication",
    ),
    _new(
        V24,
        "v24-HCC88",
        "patients with chronic stable angina and a positive exercise stress test",
        "anti-anginal trial inclusion: symptom class plus test result",
        "lab",
    ),
    _new(
        V24,
        "v24-HCC161",
        "patients with venous leg ulcers present for more than six weeks",
        "chronic wound trial inclusion: ulcer type and duration",
        "time",
    ),
]

OHDSI_TEST_CASES = _split_alternately(OHDSI_TEST_CASES)

CASE_SETS: dict[str, list[DecompositionTestCase]] = {
    "default": DEFAULT_TEST_CASES,
    "new": NEW_TEST_CASES,
    "ohdsi": OHDSI_TEST_CASES,
}
"""Named case sets; ``--split dev|test`` picks a half of ``default``, ``--split new`` the held-out set."""


def cases_for_split(split: str) -> list[DecompositionTestCase]:
    """``dev`` or ``test``: that half of the default cases; ``new``: the held-out eligibility-criteria cases."""
    if split == "new":
        return list(NEW_TEST_CASES)
    if split in ("dev", "test"):
        return [case for case in DEFAULT_TEST_CASES if case.split == split]
    raise ValueError(f"unknown split {split!r}: choose dev, test or new")

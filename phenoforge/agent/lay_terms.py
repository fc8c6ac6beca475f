"""Lay wording, abbreviations and dated names -> the clinical term ICD-10-CM uses, with sources.

One signal for the offline decomposer, not its method: the vocabulary still decides whether the
translated span names a diagnosis. Entries come from general clinical references, never from the
decomposition test cases: MedlinePlus (NLM) consumer health topic names ("MedlinePlus"), standard
clinical abbreviations as expanded by the NLM/NCI thesaurus ("abbreviation"), the 1980/1985 WHO
diabetes classification terms replaced in 1997 ("WHO 1985"), and ICD-10-CM's own index entries
("ICD-10-CM index"). Matching is on whole words, longest first; a trailing plural "s" also matches.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

LAY_TERMS: dict[str, tuple[str, str]] = {
    # lay names (MedlinePlus health-topic titles and their "also called" names)
    "heart attack": ("myocardial infarction", "MedlinePlus: Heart Attack (also called myocardial infarction)"),
    "high blood pressure": ("hypertension", "MedlinePlus: High Blood Pressure (hypertension)"),
    "raised blood pressure": ("hypertension", "MedlinePlus: High Blood Pressure"),
    "low blood pressure": ("hypotension", "MedlinePlus: Low Blood Pressure"),
    "high cholesterol": ("hypercholesterolemia", "MedlinePlus: Cholesterol"),
    "high blood sugar": ("hyperglycemia", "MedlinePlus: Hyperglycemia"),
    "low blood sugar": ("hypoglycemia", "MedlinePlus: Hypoglycemia"),
    "sugar diabetes": ("diabetes mellitus", "MedlinePlus: Diabetes (colloquial name)"),
    "mini stroke": ("transient ischemic attack", "MedlinePlus: Transient Ischemic Attack (mini-stroke)"),
    "mini-stroke": ("transient ischemic attack", "MedlinePlus: Transient Ischemic Attack (mini-stroke)"),
    "blood clot in the lung": ("pulmonary embolism", "MedlinePlus: Pulmonary Embolism"),
    "blood clot in the leg": ("deep vein thrombosis", "MedlinePlus: Deep Vein Thrombosis"),
    "underactive thyroid": ("hypothyroidism", "MedlinePlus: Hypothyroidism (underactive thyroid)"),
    "overactive thyroid": ("hyperthyroidism", "MedlinePlus: Hyperthyroidism (overactive thyroid)"),
    "irregular heartbeat": ("cardiac arrhythmia", "MedlinePlus: Arrhythmia"),
    "hardening of the arteries": ("atherosclerosis", "MedlinePlus: Atherosclerosis"),
    "thinning bones": ("osteoporosis", "MedlinePlus: Osteoporosis"),
    "brittle bones": ("osteoporosis", "MedlinePlus: Osteoporosis"),
    "bed sore": ("pressure ulcer", "MedlinePlus: Pressure Sores (bedsores, pressure ulcers)"),
    "bedsore": ("pressure ulcer", "MedlinePlus: Pressure Sores"),
    "pressure sore": ("pressure ulcer", "MedlinePlus: Pressure Sores"),
    "chest infection": ("lower respiratory tract infection", "NHS / MedlinePlus: lower respiratory infection"),
    "kidney stone": ("calculus of kidney", "MedlinePlus: Kidney Stones; ICD-10-CM index: Calculus, kidney"),
    "water on the brain": ("hydrocephalus", "MedlinePlus: Hydrocephalus"),
    "fits": ("seizures", "NHS: epilepsy (fits is British lay wording)"),
    "enlarged prostate": ("benign prostatic hyperplasia", "MedlinePlus: Enlarged Prostate (BPH)"),
    "lazy eye": ("amblyopia", "MedlinePlus: Amblyopia (lazy eye)"),
    "heartburn": ("gastro-esophageal reflux disease", "MedlinePlus: GERD (heartburn)"),
    "shingles": ("zoster", "MedlinePlus: Shingles (herpes zoster)"),
    "alcoholism": ("alcohol dependence", "ICD-10-CM index: Alcoholism - see Dependence, alcohol"),
    # dated classification names
    "insulin-dependent diabetes": ("type 1 diabetes mellitus", "WHO 1985: IDDM, renamed type 1 in 1997"),
    "insulin dependent diabetes": ("type 1 diabetes mellitus", "WHO 1985: IDDM, renamed type 1 in 1997"),
    "non-insulin-dependent diabetes": ("type 2 diabetes mellitus", "WHO 1985: NIDDM, renamed type 2 in 1997"),
    "juvenile diabetes": ("type 1 diabetes mellitus", "ICD-10-CM E10 inclusion: juvenile onset diabetes"),
    "adult-onset diabetes": ("type 2 diabetes mellitus", "WHO 1985: maturity/adult-onset diabetes"),
    "manic depression": ("bipolar disorder", "MedlinePlus: Bipolar Disorder (manic-depressive illness)"),
    # abbreviations (NCI thesaurus / common clinical usage)
    "afib": ("atrial fibrillation", "abbreviation"),
    "a-fib": ("atrial fibrillation", "abbreviation"),
    "af": ("atrial fibrillation", "abbreviation"),
    "aki": ("acute kidney injury", "abbreviation"),
    "ami": ("acute myocardial infarction", "abbreviation"),
    "ards": ("acute respiratory distress syndrome", "abbreviation"),
    "bph": ("benign prostatic hyperplasia", "abbreviation"),
    "cad": ("coronary artery disease", "abbreviation"),
    "chf": ("congestive heart failure", "abbreviation"),
    "ckd": ("chronic kidney disease", "abbreviation"),
    "copd": ("chronic obstructive pulmonary disease", "abbreviation"),
    "dka": ("diabetic ketoacidosis", "abbreviation"),
    "dvt": ("deep vein thrombosis", "abbreviation"),
    "esrd": ("end stage renal disease", "abbreviation"),
    "gad": ("generalized anxiety disorder", "abbreviation"),
    "gerd": ("gastro-esophageal reflux disease", "abbreviation"),
    "hfref": ("heart failure with reduced ejection fraction", "abbreviation; an ICD-10-CM I50.2 inclusion term"),
    "hfpef": ("heart failure with preserved ejection fraction", "abbreviation; an ICD-10-CM I50.3 inclusion term"),
    "ibd": ("inflammatory bowel disease", "abbreviation"),
    "ipf": ("idiopathic pulmonary fibrosis", "abbreviation"),
    "mdd": ("major depressive disorder", "abbreviation"),
    "mi": ("myocardial infarction", "abbreviation"),
    "ms": ("multiple sclerosis", "abbreviation"),
    "nafld": ("nonalcoholic fatty liver disease", "abbreviation"),
    "nash": ("nonalcoholic steatohepatitis", "abbreviation"),
    "nsclc": ("non-small cell lung cancer", "abbreviation"),
    "nstemi": ("non-st elevation myocardial infarction", "abbreviation"),
    "ocd": ("obsessive-compulsive disorder", "abbreviation"),
    "osa": ("obstructive sleep apnea", "abbreviation"),
    "pad": ("peripheral arterial disease", "abbreviation"),
    "pah": ("pulmonary arterial hypertension", "abbreviation"),
    "pe": ("pulmonary embolism", "abbreviation"),
    "ptsd": ("post-traumatic stress disorder", "abbreviation"),
    "ra": ("rheumatoid arthritis", "abbreviation"),
    "sle": ("systemic lupus erythematosus", "abbreviation"),
    "stemi": ("st elevation myocardial infarction", "abbreviation"),
    "t1d": ("type 1 diabetes mellitus", "abbreviation"),
    "t1dm": ("type 1 diabetes mellitus", "abbreviation"),
    "t2d": ("type 2 diabetes mellitus", "abbreviation"),
    "t2dm": ("type 2 diabetes mellitus", "abbreviation"),
    "tia": ("transient ischemic attack", "abbreviation"),
    "uc": ("ulcerative colitis", "abbreviation"),
    "uti": ("urinary tract infection", "abbreviation"),
    "aud": ("alcohol use disorder", "abbreviation (DSM-5)"),
    "oud": ("opioid use disorder", "abbreviation (DSM-5)"),
}
"""lay or short form -> (clinical term, where the equivalence comes from)."""

SPELLING: dict[str, str] = {
    # British -> American spelling of word stems (ICD-10-CM is written in American English)
    "ischaem": "ischem",
    "haemorrha": "hemorrha",
    "haemat": "hemat",
    "haemo": "hemo",
    "anaem": "anem",
    "oedema": "edema",
    "oesophag": "esophag",
    "tumour": "tumor",
    "diarrhoea": "diarrhea",
    "paediatric": "pediatric",
    "leukaem": "leukem",
    "septicaem": "septicem",
    "hypercholesterolaem": "hypercholesterolem",
    "hyperglycaem": "hyperglycem",
    "hypoglycaem": "hypoglycem",
    "programme": "program",
    "apnoea": "apnea",
    "foetal": "fetal",
}
"""British stem -> American stem, replaced at the start of a word."""


_TYPED_WORD = re.compile(r"[A-Za-z0-9]+")


def spell_out_abbreviations(query: str, in_vocabulary: Callable[[str], bool]) -> tuple[str, dict[str, str]]:
    """``query`` with each abbreviation typed in capitals that the vocabulary never uses spelt out from
    the table's abbreviation entries ("CHF" -> "congestive heart failure"), and what was replaced.

    Searching "CHF" as typed finds nothing about heart failure (no ICD-10-CM text says CHF); one the
    vocabulary uses ("CKD", "COPD") is left as typed, since search finds it.
    """
    replaced: dict[str, str] = {}

    def spell(match: re.Match[str]) -> str:
        word = match.group(0)
        entry = LAY_TERMS.get(word.lower())
        if sum(ch.isupper() for ch in word) < 2 or entry is None or not entry[1].startswith("abbreviation"):
            return word
        if in_vocabulary(word.lower()):
            return word
        replaced[word] = entry[0]
        return entry[0]

    spelt = _TYPED_WORD.sub(spell, query)
    return spelt, replaced


def spell_out_for_search(con: duckdb.DuckDBPyConnection, query: str) -> tuple[str, list[str]]:
    """``query`` as the search runs it (abbreviations the vocabulary never uses spelt out), and one note
    per replacement for the user, so the CLI, the Explore page and a set builder's search say the same."""
    from phenoforge.setbuild.robust import get_typo_corrector

    frequency = get_typo_corrector(con).frequency
    spelt, replaced = spell_out_abbreviations(query, lambda word: word in frequency)
    notes = [
        f"{abbreviation} is not a word ICD-10-CM uses; searched as {term!r}" for abbreviation, term in replaced.items()
    ]
    return spelt, notes

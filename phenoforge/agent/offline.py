"""A rule-based decomposer that needs no key, so every page and eval works on a fresh machine.

Steps: lower-case and normalise punctuation; translate lay wording with a small synonym table;
strip framing phrases (who, where, when, how diagnosed); split lists and conjunctions into
separate conditions, keeping "and"/"or" that belong to a clinical name ("disorders of X and Y" is
rare in descriptions, so only a short protected list is kept whole); trim leftover qualifier words
at the edges. It is deliberately simple and its errors are measured by ``decompose-eval``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Lay wording -> clinical term. Checked longest first, on word boundaries.
SYNONYMS: dict[str, str] = {
    "high blood pressure": "hypertension",
    "raised blood pressure": "hypertension",
    "elevated blood pressure": "hypertension",
    "heart attack": "myocardial infarction",
    "heart attacks": "myocardial infarction",
    "sugar diabetes": "diabetes mellitus",
    "high blood sugar": "hyperglycemia",
    "high cholesterol": "hypercholesterolemia",
    "mini stroke": "transient ischemic attack",
    "mini-stroke": "transient ischemic attack",
    "brain attack": "stroke",
    "weak heart": "heart failure",
    "heart failure with reduced ejection fraction": "heart failure",
    "hfref": "heart failure",
    "hfpef": "heart failure",
    "chf": "congestive heart failure",
    "copd": "chronic obstructive pulmonary disease",
    "ckd": "chronic kidney disease",
    "esrd": "end stage renal disease",
    "afib": "atrial fibrillation",
    "a-fib": "atrial fibrillation",
    "af": "atrial fibrillation",
    "ami": "acute myocardial infarction",
    "mi": "myocardial infarction",
    "t2dm": "type 2 diabetes mellitus",
    "t1dm": "type 1 diabetes mellitus",
    "t2d": "type 2 diabetes mellitus",
    "t1d": "type 1 diabetes mellitus",
    "dka": "diabetic ketoacidosis",
    "dvt": "deep vein thrombosis",
    "pe": "pulmonary embolism",
    "aids": "hiv disease",
    "ibd": "inflammatory bowel disease",
    "ra": "rheumatoid arthritis",
    "sle": "systemic lupus erythematosus",
    "lupus": "systemic lupus erythematosus",
    "ms": "multiple sclerosis",
    "mdd": "major depressive disorder",
    "gad": "generalized anxiety disorder",
    "ptsd": "post-traumatic stress disorder",
    "uti": "urinary tract infection",
    "cap": "community-acquired pneumonia",
    "nafld": "nonalcoholic fatty liver disease",
    "kidney failure": "renal failure",
    "kidney stones": "kidney stone",
    "fits": "epilepsy",
    "seizures": "seizure disorder",
    "thinning bones": "osteoporosis",
    "bed sores": "pressure ulcer",
    "bedsores": "pressure ulcer",
    "pressure sores": "pressure ulcer",
    "blood clots in the legs": "deep vein thrombosis",
    "blood clot in the lung": "pulmonary embolism",
    "underactive thyroid": "hypothyroidism",
    "overactive thyroid": "hyperthyroidism",
    "irregular heartbeat": "cardiac arrhythmia",
    "hardening of the arteries": "atherosclerosis",
    "liver scarring": "liver cirrhosis",
    "alcoholism": "alcohol dependence",
    "drug addiction": "drug dependence",
    "being overweight": "overweight",
    "severe obesity": "morbid obesity",
    "memory loss": "dementia",
}

# Phrases that frame the population rather than name a condition. Matched as whole words, longest
# first; removed wherever they occur.
QUALIFIER_PHRASES: list[str] = [
    "patients presenting to the emergency department with",
    "presenting to the emergency department with",
    "presenting to the emergency department",
    "admitted to the intensive care unit with",
    "admitted to hospital with",
    "admitted to the hospital with",
    "admitted with",
    "hospitalized for",
    "hospitalised for",
    "hospitalized with",
    "hospitalised with",
    "hospitalized",
    "hospitalised",
    "in the emergency department",
    "emergency department",
    "intensive care unit",
    "in the community",
    "in primary care",
    "outpatients",
    "inpatients",
    "a documented history of",
    "documented history of",
    "a prior history of",
    "a history of",
    "history of",
    "a new diagnosis of",
    "new diagnosis of",
    "newly diagnosed with",
    "newly diagnosed",
    "new onset",
    "new-onset",
    "incident",
    "recently diagnosed with",
    "recently diagnosed",
    "a recent",
    "recent",
    "a confirmed diagnosis of",
    "confirmed diagnosis of",
    "a clinical diagnosis of",
    "clinical diagnosis of",
    "a physician's diagnosis of",
    "physician's diagnosis of",
    "a physician diagnosis of",
    "physician diagnosis of",
    "physician-diagnosed",
    "doctor-diagnosed",
    "a diagnosis of",
    "diagnosis of",
    "diagnosed with",
    "diagnosed",
    "suffering from",
    "survivors of",
    "community-dwelling",
    "current or former smokers with",
    "smokers with",
    "living with",
    "at risk of",
    "at high risk of",
    "suspected",
    "known",
    "established",
    "documented",
    "confirmed",
    "prior",
    "previous",
    "existing",
    "pre-existing",
    "current",
    "ongoing",
    "stable",
    "treated",
    "untreated",
    "inadequately controlled",
    "poorly controlled",
    "uncontrolled",
    "participants with",
    "subjects with",
    "individuals with",
    "people with",
    "persons with",
    "patients with",
    "adults with",
    "adult patients with",
    "children with",
    "men and women with",
    "a study in adults with",
    "a study in patients with",
    "a study of",
    "a trial in",
    "study in",
    "trial of",
    "treatment of",
    "management of",
    "aged 18 years or older",
    "aged 18 years and older",
    "aged 65 years or older",
    "aged 65 and older",
    "aged 18 or older",
    "aged 40 to 75 years",
    "older adults",
    "elderly",
    "adult",
    "adults",
    "patients",
    "patient",
    "participants",
    "subjects",
    "individuals",
    "people",
    "persons",
    "pregnant women",
    "postmenopausal women",
    "women",
    "men",
    "children",
    "adolescents",
    "veterans",
    "medicare beneficiaries",
    "beneficiaries",
    "medicare",
    "residents of nursing homes",
    "nursing home residents",
    "nursing home",
    "requiring hospitalization",
    "requiring admission",
    "at baseline",
    "at enrollment",
    "within the past year",
    "within the past 12 months",
    "within 12 months",
    "in the past year",
    "during the study period",
    "per icd-10-cm",
    "by icd-10-cm codes",
]

# Trailing clauses about how a diagnosis was ascertained: everything from the phrase on is dropped.
TRAILING_CLAUSES: list[str] = [
    "inadequately controlled",
    "despite",
    "on maintenance",
    "on stable",
    "confirmed by",
    "as defined by",
    "defined by",
    "according to",
    "based on",
    "meeting",
    "who meet",
    "who are",
    "who have",
    "who had",
    "who were",
    "requiring",
    "receiving",
    "treated with",
    "on treatment with",
    "undergoing",
    "eligible for",
    "scheduled for",
    "with an ejection fraction",
    "with a bmi",
    "with bmi",
]

# Conditions whose names contain "and"/"or"/"with"/commas and must not be split.
PROTECTED: list[str] = [
    "overweight and obesity",
    "fluid and electrolyte disorders",
    "alcohol and drug",
    "chronic obstructive pulmonary disease and asthma",
    "crohn's disease and ulcerative colitis",
    "schizophrenia and other psychotic disorders",
    "anxiety and depression",
    "hemiplegia and hemiparesis",
]

EDGE_WORDS = {
    "a", "an", "the", "with", "of", "and", "or", "in", "for", "to", "who", "have", "has", "had",
    "any", "either", "both", "other", "such", "as", "including", "e.g.", "i.e.", "etc", "due",
    "from", "on", "at", "by", "among", "aged", "years", "older", "over", "under", "is", "are",
    "were", "be", "been", "also", "all", "type", "those", "without", "cohort", "population",
}
KEEP_TYPE = re.compile(r"^type\s+(1|2|i|ii|one|two)\b")


# clinical targets map to themselves so "systemic lupus erythematosus" is not re-expanded at "lupus"
_LAY_MAP = {**{target: target for target in SYNONYMS.values()}, **SYNONYMS}
_LAY = re.compile(
    r"(?<![\w-])(" + "|".join(re.escape(lay) for lay in sorted(_LAY_MAP, key=len, reverse=True)) + r")(?![\w-])"
)


def _sub_phrases(text: str, phrases: list[str], replacement: str) -> str:
    for phrase in sorted(phrases, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", replacement, text)
    return text


def _normalise(description: str) -> str:
    text = description.lower()
    text = text.replace("’", "'").replace("“", '"').replace("”", '"')
    text = re.sub(r"\([^)]*\)", " ", text)  # parenthetical asides: "(ED presentation)", "(BMI>=30)"
    text = re.sub(r"[\"“”;:]", ",", text)
    text = text.replace("/", " or ")
    text = re.sub(r"\b([a-z][a-z' -]*?) stage (\d+)\s*(?:or|and|,)\s*(\d+)\b", r"\1 stage \2, \1 stage \3", text)
    text = re.sub(r"\s+", " ", text)
    return text.strip(" .,")


def _trim(fragment: str) -> str:
    words = fragment.split()
    while words and (words[0] in EDGE_WORDS and not KEEP_TYPE.match(" ".join(words))):
        words.pop(0)
    while words and words[-1] in EDGE_WORDS:
        words.pop()
    return " ".join(words).strip(" ,.-")


def _is_clinical(term: str) -> bool:
    """At least one word of three or more letters that is not a framing word."""
    return any(len(word) >= 3 and word.isalpha() is not False and word not in EDGE_WORDS
               and not word.isdigit() for word in re.findall(r"[a-z][a-z'-]+", term))


def _expand_type(fragment: str) -> str:
    fragment = re.sub(r"\btype (i|one)\b", "type 1", fragment)
    fragment = re.sub(r"\btype (ii|two)\b", "type 2", fragment)
    return fragment


def offline_decompose(description: str) -> list[str]:
    """Clinical terms named by ``description``, in order, deduplicated."""
    text = _normalise(description)
    for clause in TRAILING_CLAUSES:
        text = re.split(rf"(?<!\w){re.escape(clause)}(?!\w)", text, maxsplit=1)[0]
    text = _LAY.sub(lambda match: _LAY_MAP[match.group(0)], text)  # one pass: no re-substitution
    text = _sub_phrases(text, QUALIFIER_PHRASES, " , ")
    protected: dict[str, str] = {}
    for index, phrase in enumerate(PROTECTED):
        if phrase in text:
            token = f"\x01{index}\x01"
            protected[token] = phrase
            text = text.replace(phrase, token)
    parts = re.split(r",|\band/or\b|\band\b|\bor\b|\bplus\b|\bas well as\b|\balong with\b|\bwith or without\b",
                     text)
    terms: list[str] = []
    seen: set[str] = set()
    for part in parts:
        for token, phrase in protected.items():
            part = part.replace(token, phrase)
        term = _expand_type(_trim(" ".join(part.split())))
        if term in seen or not _is_clinical(term):
            continue
        if term.startswith("type ") and len(term.split()) == 2:
            continue  # a lone "type 2" left from "type 1 or type 2 diabetes" is handled below
        seen.add(term)
        terms.append(term)
    return _distribute_type(terms, text)


def _distribute_type(terms: list[str], text: str) -> list[str]:
    """"type 1 or type 2 diabetes" -> both types; a bare "type 1" joins the next condition."""
    match = re.search(r"type (1|2) (?:,|or|and)?\s*type (1|2) ([a-z ]+)", text)
    if not match:
        return terms
    condition = _trim(match.group(3))
    wanted = [f"type {match.group(1)} {condition}", f"type {match.group(2)} {condition}"]
    out = [term for term in terms if term != condition and term != f"type {match.group(2)} {condition}"]
    return [*wanted, *[term for term in out if term not in wanted]]


def offline_decomposer() -> Callable[[str], list[str]]:
    """The offline decomposer as the same ``str -> list[str]`` shape as the Claude one."""
    return offline_decompose

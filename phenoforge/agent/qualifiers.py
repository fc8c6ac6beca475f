"""What a description says that no seed term carries: age, setting, treatment, time, scores, exclusions.

"Adults hospitalized with heart failure" becomes one term, heart failure; "adults" and "hospitalized"
are criteria no ICD-10-CM diagnosis code expresses. They are not dropped silently: every run of words
the terms do not cover (after the decomposer's own normalisation, so "high blood pressure" is covered
by "hypertension") is listed back with a kind, to be applied in the cohort's other criteria.

The kinds come from cue words of general English (an age word, a care setting, a treatment verb, a
time word, a score or comparator), not from any set of descriptions; a run with no cue is "other".
Words that only frame the population ("patients", "who have", "diagnosed with") are not qualifiers.
"""

from __future__ import annotations

import re

from phenoforge.agent.offline import CHUNK_BREAK, NEGATIONS, PREGNANCY_WORDS, _fold_plural, normalise
from phenoforge.agent.state import Qualifier
from phenoforge.engine.codes import codes_in_text
from phenoforge.engine.query import STOPWORDS, tokenize


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words that frame the population or join phrases; a run of only these says nothing to apply.
FRAME = _words("""
patient patients participant participants subject subjects individual individuals people person persons population
cohort cohorts case cases who whom which that whose have has had having been being were was is are be with and or of
diagnosed diagnosis diagnoses documented confirmed known history clinical clinically condition conditions disease
diseases disorder disorders a an the any all those these this their them they
""")
CUES: dict[str, frozenset[str]] = {
    "exclusion": NEGATIONS,
    "score or lab value": _words("""
score scores scale class grade nyha egfr gfr hba1c a1c bmi level levels value values ratio index fraction count
mg dl ml kg mmol mmhg percent % > < >= <= ≥ ≤ greater less above below least
"""),
    "treatment": _words("""
on taking take takes treated treatment treatments therapy therapies receiving received receive prescribed
prescription medication medications drug drugs dose doses dosing initiating initiated starting started users use
using undergoing underwent surgery surgical procedure procedures transplant transplantation dialysis
"""),
    "setting": _words("""
hospitalized hospitalised hospitalization hospitalisation hospital hospitals admitted admission admissions inpatient
inpatients outpatient outpatients icu intensive emergency ed clinic clinics ward wards nursing home homes community
discharged discharge primary care facility facilities residential
"""),
    "time": _words("""
within during since after before prior previous previously recent recently past last first new newly onset
duration days day weeks week months month years year ago follow-up followup period baseline time times
"""),
    "age or sex": _words("""
adult adults child children pediatric paediatric infant infants neonate neonates newborn newborns adolescent
adolescents teen teens teenager teenagers young younger old older elderly geriatric aged age ages senior seniors
men women man woman male males female females boys girls
"""),
}


def _kind(words: list[str]) -> str:
    for kind, cues in CUES.items():
        if any(word in cues for word in words):
            return kind
    return "other"


def _own_kind(word: str) -> str | None:
    return next((kind for kind, cues in CUES.items() if kind != "exclusion" and word in cues), None)


def uncoded_qualifiers(description: str, terms: list[str]) -> list[Qualifier]:
    """The parts of ``description`` no term covers, each with its kind, in the order written."""
    for code in codes_in_text(description):  # a typed code is a term of its own (its name), not a qualifier
        description = re.sub(rf"(?<![\w.]){re.escape(code)}(?!\w)", " , ", description)
    covered: set[str] = set()
    for term in terms:
        covered.update(_fold_plural(token) for token in tokenize(normalise(term)))
        if "pregnancy" in covered:
            covered.update(PREGNANCY_WORDS)
    text = normalise(description)
    out: list[Qualifier] = []
    for chunk in CHUNK_BREAK.split(f" {text} "):
        if not chunk or not chunk.strip():
            continue
        run: list[str] = []
        for raw in [*chunk.split(), ""]:  # "" ends the last run
            word = raw.strip(".'\"")
            tokens = [_fold_plural(token) for token in tokenize(word)]
            is_covered = bool(tokens) and all(token in covered for token in tokens)
            if word and not is_covered:
                kind = _own_kind(word)
                if run and kind is not None and _kind(run) not in ("other", "exclusion") and _kind(run) != kind:
                    # "adults hospitalized": an age, then a setting; "on metformin for 6 months": the time
                    # starts at the function words and numbers before its cue word
                    cut = len(run)
                    while cut > 1 and run[cut - 1] in STOPWORDS:
                        cut -= 1
                    number = cut
                    while number > 1 and run[number - 1].isdigit():
                        number -= 1
                    if number < cut and number > 1 and run[number - 1] in STOPWORDS:
                        cut = number - 1  # "for 6" before "months"; not "over 65" before "in the icu"
                    _close(run[:cut], out)
                    run = run[cut:]
                run.append(word)
                continue
            _close(run, out)
            run = []
    seen: set[str] = set()
    unique = []
    for qualifier in out:
        if qualifier.text not in seen:
            seen.add(qualifier.text)
            unique.append(qualifier)
    return unique


def _close(run: list[str], out: list[Qualifier]) -> None:
    keep = [word for word in run if word]
    while keep and (keep[-1] in FRAME or keep[-1] in STOPWORDS):
        keep.pop()
    while keep and keep[0] in FRAME and keep[0] not in NEGATIONS:
        keep.pop(0)
    if not keep or all(word in FRAME or word in STOPWORDS for word in keep):
        return
    out.append(Qualifier(text=" ".join(keep), kind=_kind(keep)))


def qualifier_lines(qualifiers: list[Qualifier]) -> list[str]:
    return [f"{qualifier.kind}: {qualifier.text}" for qualifier in qualifiers]

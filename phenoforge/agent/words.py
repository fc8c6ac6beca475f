"""The words the curated name rule compares (shared by ``nodes`` and ``scope``)."""

from __future__ import annotations

from phenoforge.engine.query import tokenize

GENERIC_WORDS = frozenset(
    {
        "disease",
        "diseases",
        "disorder",
        "disorders",
        "mellitus",
        "condition",
        "conditions",
        "syndrome",
        "syndromes",
        "unspecified",
        "specified",
        "nos",
        "status",
        "type",
    }
)
WORD_SYNONYMS = {
    "renal": "kidney",
    "kidneys": "kidney",
    "cardiac": "heart",
    "hepatic": "liver",
    "pulmonary": "lung",
    "lungs": "lung",
    "cerebrovascular": "stroke",
    "neoplasm": "cancer",
    "neoplasms": "cancer",
    "malignant": "cancer",
    "malignancy": "cancer",
    "tumor": "cancer",
    "tumors": "cancer",
    "tumour": "cancer",
    "carcinoma": "cancer",
    "seizures": "seizure",
    "epileptic": "epilepsy",
    "diabetic": "diabetes",
    "obese": "obesity",
    "depressive": "depression",
    "hypertensive": "hypertension",
    "psychotic": "psychosis",
    "psychoses": "psychosis",
    "arthritic": "arthritis",
    "anemias": "anemia",
    "ulcers": "ulcer",
    "fractures": "fracture",
    "infections": "infection",
    "cancers": "cancer",
}


def content_words(text: str) -> set[str]:
    """The words the name rule compares: tokenized, generic words out, plurals and synonyms folded."""
    words: set[str] = set()
    for token in tokenize(text):
        token = WORD_SYNONYMS.get(token, token)
        if token in GENERIC_WORDS:
            continue
        if len(token) > 4 and token.endswith("s") and not token.endswith(("ss", "is", "us")):
            token = WORD_SYNONYMS.get(token[:-1], token[:-1])
        words.add(token)
    return words

"""ICD-10-CM code normalisation: accept codes as people type them."""

from __future__ import annotations

import re

_ALLOWED = re.compile(r"^[A-Z0-9][A-Z0-9-]{0,6}$")


def code_key(raw: str) -> str | None:
    """Lookup key for a typed code: upper case, no dot, no white space; None if it cannot be a code.

    >>> code_key(" e11.22 "), code_key("E1122"), code_key("not a code")
    ('E1122', 'E1122', None)
    """
    if not isinstance(raw, str):
        return None
    key = re.sub(r"\s+", "", raw).replace(".", "").upper()
    if not _ALLOWED.match(key):
        return None
    return key


def dotted(key: str) -> str:
    """Dotted display form of an undotted ICD-10-CM code key (``E1122`` -> ``E11.22``)."""
    return key if len(key) <= 3 else f"{key[:3]}.{key[3:]}"


_TYPED_CODE = re.compile(r"(?<![\w.])([A-Za-z]\d[0-9A-Za-z](?:\.[0-9A-Za-z]{1,4}|[0-9][0-9A-Za-z]{0,3})?)(?!\w)")


# Words after which a bare three-character token is read as a category code ("with I50", "codes I50 and I11");
# after any other word it is part of a name ("CMS-HCC V28", "vitamin B12", "stage G3a").
_CODE_LEAD_WORDS = frozenset(
    [
        "with",
        "and",
        "or",
        "of",
        "in",
        "code",
        "codes",
        "category",
        "categories",
        "icd",
        "icd10",
        "icd-10",
        "icd-10-cm",
        "cm",
        "including",
        "plus",
        "without",
        "excluding",
        "except",
        "not",
        "also",
    ]
)
_WORD_BEFORE = re.compile(r"([\w.\-]+)\W*$")


def codes_in_text(text: str) -> list[str]:
    """Tokens of ``text`` shaped like ICD-10-CM codes (``I50.9``, ``e1122``, ``I50``), as typed, in order.

    Undotted, the fourth character must be a digit ("T2DM" is an abbreviation). A bare three-character
    token counts only where a code can stand: at the start, after another code, or after a word such as
    "with", "or" or "codes"; after a name it belongs to the name ("CMS-HCC V28", "vitamin B12").

    >>> codes_in_text("adults with I50.9 or e1122, vitamin B12, T2DM, HbA1c")
    ['I50.9', 'e1122']
    >>> codes_in_text("I50 or I11 in the CMS-HCC V28 model")
    ['I50', 'I11']
    """
    found: list[str] = []
    for match in _TYPED_CODE.finditer(text):
        token = match.group(1)
        if len(token) == 3:
            before = _WORD_BEFORE.search(text[: match.start(1)])
            if before is not None:
                word = before.group(1).lower()
                previous_is_code = bool(_TYPED_CODE.fullmatch(before.group(1)))
                if word not in _CODE_LEAD_WORDS and not previous_is_code:
                    continue
        found.append(token)
    return found


def typed_as_code(token: str) -> bool:
    """Whether a code-shaped token was surely meant as a code (dotted, or four characters or more), so a
    code the vocabulary lacks is worth reporting; "B12" or "G3a" may be words of a description."""
    return "." in token or len(token) >= 4


def single_code_token(text: str) -> str | None:
    """``text`` stripped when it could be one code typed as a whole query (one token holding a digit),
    else None: the cheap test before a vocabulary lookup ("I50.9", " i509 "; not "heart failure").

    >>> single_code_token(" i509 "), single_code_token("heart failure"), single_code_token("asthma")
    ('i509', None, None)
    """
    typed = text.strip()
    return typed if typed and not any(ch.isspace() for ch in typed) and any(ch.isdigit() for ch in typed) else None

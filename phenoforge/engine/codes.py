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


def codes_in_text(text: str) -> list[str]:
    """Tokens of ``text`` shaped like ICD-10-CM codes (``I50.9``, ``e1122``, ``C4A``), as typed, in order;
    undotted, the fourth character must be a digit ("T2DM" is an abbreviation).

    >>> codes_in_text("adults with I50.9 or e1122, vitamin B12, T2DM, HbA1c")
    ['I50.9', 'e1122', 'B12']
    """
    return _TYPED_CODE.findall(text)


def typed_as_code(token: str) -> bool:
    """Whether a code-shaped token was surely meant as a code (dotted, or four characters or more), so a
    code the vocabulary lacks is worth reporting; "B12" or "G3a" may be words of a description."""
    return "." in token or len(token) >= 4

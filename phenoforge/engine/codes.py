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

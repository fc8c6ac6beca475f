"""A signed-off version written out: CSV with each code's provenance, decision and reason; a FHIR R4 ValueSet.

Stored text is written as it was typed, except that control characters (which the store refuses on input, but
an older or hand-edited file may hold) are escaped: a CSV cell as ``\\x1b``, a JSON string as ``\\u001b``.
"""

from __future__ import annotations

import hashlib
import io
import json

from phenoforge.agent.export import concept_set_fhir_valueset, fhir_name
from phenoforge.agent.state import ConceptEntry, ConceptSet
from phenoforge.console import printable
from phenoforge.csv_safe import SafeWriter
from phenoforge.lists.store import ListVersion

VERSION_CSV_FIELDS = ["code", "description", "provenance", "decision", "reason", "decided_by", "decided_at"]
FHIR_ID_MAX = 64
FHIR_URL_PREFIX = "urn:phenoforge:valueset:"


def version_csv(version: ListVersion, excluded: bool = False) -> str:
    """One row per code of the version (formula-like cells quoted by ``SafeWriter``, control characters
    escaped); with ``excluded``, the rejected and removed codes follow, their decision saying so."""
    out = io.StringIO()
    writer = SafeWriter(out, lineterminator="\n")
    writer.writerow(VERSION_CSV_FIELDS)
    for entry in [*version.codes, *(version.excluded if excluded else [])]:
        writer.writerow(
            [
                printable(cell)
                for cell in (
                    entry.code,
                    entry.name,
                    entry.provenance,
                    entry.decision,
                    entry.reason,
                    entry.decided_by,
                    entry.decided_at,
                )
            ]
        )
    return out.getvalue()


def _escaped_list_id(list_id: str) -> str:
    """The list name in FHIR id characters, one to one: '.' is written '..' and '_' '.-' (a '.' in the result
    is always followed by '.' or '-')."""
    return "".join({".": "..", "_": ".-"}.get(ch, ch) for ch in list_id)


def fhir_id(list_id: str, number: int) -> str:
    """A FHIR id (``[A-Za-z0-9.-]{1,64}``) for version ``number`` of ``list_id``, different for every list and
    version: the escaped name and ``-v<number>``; a name too long for 64 characters is cut (between escapes) and
    followed by '.' and 10 hex digits of the SHA-256 of the full name, which no escaped name holds."""
    suffix = f"-v{number}"
    escaped = _escaped_list_id(list_id)
    if len(escaped) + len(suffix) <= FHIR_ID_MAX:
        return escaped + suffix
    digest = hashlib.sha256(list_id.encode("utf-8")).hexdigest()[:10]
    room = FHIR_ID_MAX - len(suffix) - 1 - len(digest)
    cut, kept = "", 0
    for ch in list_id:
        unit = _escaped_list_id(ch)
        if kept + len(unit) > room:
            break
        cut, kept = cut + unit, kept + len(unit)
    return f"{cut}.{digest}{suffix}"


def version_fhir(version: ListVersion) -> dict[str, object]:
    """The version as a FHIR R4 ValueSet: ``version`` is the version's number, ``compose.include[].version``
    the vocabulary release it was signed off with; status ``active`` only when its signature verified with the
    reviewer's key on this computer (else ``draft``, and the description says why). The id and url are unique
    per list and version (:func:`fhir_id`); ``name`` is a valid identifier."""
    concept_set = ConceptSet(
        description=version.description,
        reviewer=version.reviewer,
        entries=[
            ConceptEntry(code=e.code, name=e.name, tier="curated", source=e.provenance, evidence=e.reason)
            for e in version.codes
        ],
    )
    signed_off = version.signed_off
    set_id = fhir_id(version.list_id, version.number)
    value_set = concept_set_fhir_valueset(
        None,
        concept_set,
        set_id=set_id,
        status="active" if signed_off else "draft",
        release=version.vocabulary_release,
        version=str(version.number),
    )
    value_set["id"] = set_id
    value_set["url"] = FHIR_URL_PREFIX + set_id
    value_set["name"] = fhir_name(f"{version.list_id} v{version.number}", "List")
    value_set["date"] = version.saved_at
    value_set["publisher"] = version.reviewer
    if not signed_off:
        value_set["description"] = f"NOT SIGNED OFF ({version.signature_check.message}). {value_set['description']}"
    return value_set


def version_fhir_json(version: ListVersion) -> str:
    """The ValueSet as JSON; C1 and bidi controls (``json`` escapes only C0) written as ``\\uXXXX``."""
    text = json.dumps(version_fhir(version), indent=2, ensure_ascii=False)
    return "".join(f"\\u{ord(ch):04x}" if ch not in "\n\t" and printable(ch) != ch else ch for ch in text)

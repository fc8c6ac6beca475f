"""A signed-off version written out: CSV with each code's provenance, decision and reason; a FHIR R4 ValueSet."""

from __future__ import annotations

import io
import json

from phenoforge.agent.export import concept_set_fhir_valueset
from phenoforge.agent.state import ConceptEntry, ConceptSet
from phenoforge.csv_safe import SafeWriter
from phenoforge.lists.store import ListVersion

VERSION_CSV_FIELDS = ["code", "description", "provenance", "decision", "reason", "decided_by", "decided_at"]


def version_csv(version: ListVersion, excluded: bool = False) -> str:
    """One row per code of the version (formula-like cells quoted by ``SafeWriter``); with ``excluded``, the
    rejected and removed codes follow, their decision saying so."""
    out = io.StringIO()
    writer = SafeWriter(out, lineterminator="\n")
    writer.writerow(VERSION_CSV_FIELDS)
    for entry in [*version.codes, *(version.excluded if excluded else [])]:
        writer.writerow(
            [
                entry.code,
                entry.name,
                entry.provenance,
                entry.decision,
                entry.reason,
                entry.decided_by,
                entry.decided_at,
            ]
        )
    return out.getvalue()


def version_fhir(version: ListVersion) -> dict[str, object]:
    """The version as a FHIR R4 ValueSet: ``version`` is the version's number, ``compose.include[].version``
    the vocabulary release it was signed off with, status ``active`` (a signed-off list)."""
    concept_set = ConceptSet(
        description=version.description,
        reviewer=version.reviewer,
        entries=[
            ConceptEntry(code=e.code, name=e.name, tier="curated", source=e.provenance, evidence=e.reason)
            for e in version.codes
        ],
    )
    value_set = concept_set_fhir_valueset(
        None,
        concept_set,
        set_id=f"{version.list_id}-v{version.number}",
        status="active",
        release=version.vocabulary_release,
        version=str(version.number),
    )
    value_set["date"] = version.saved_at
    value_set["publisher"] = version.reviewer
    return value_set


def version_fhir_json(version: ListVersion) -> str:
    return json.dumps(version_fhir(version), indent=2, ensure_ascii=False)

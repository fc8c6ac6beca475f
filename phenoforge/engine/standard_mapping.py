"""Map OMOP standard concepts (SNOMED) of a concept set to ICD-10-CM through the Athena tables.

An OHDSI concept set means "these standard concepts (and their descendants), minus the excluded
ones". An ICD-10-CM code belongs to it when the code's 'Maps to' edge lands on one of them: that is
how an OMOP ETL would have turned the source code into a condition record the cohort then selects.
So exclusion happens on standard concepts, before mapping, and a code that maps to both an included
and an excluded concept stays in (the included concept would still select the record).

Everything that contributes no code is reported with a reason, never dropped silently: vocabularies
with no diagnosis codes (LOINC, ATC, RxNorm, ...), broad groupers over ``fanout_threshold``,
concepts no ICD-10-CM code maps to, and concept ids missing from the loaded vocabulary (the cohort
was written against a different Athena release than the user's).
"""

from __future__ import annotations

from collections.abc import Iterable

import duckdb

from phenoforge.engine.models import ConceptItem, Resolution, SkippedItem
from phenoforge.engine.schema import ICD10CM

SNOMED = "SNOMED"
MAPPABLE_VOCABULARIES: frozenset[str] = frozenset({SNOMED})
"""Standard condition vocabularies the Athena loader keeps and this module maps from."""

NON_CONDITION_VOCABULARIES: dict[str, str] = {
    "LOINC": "laboratory tests and measurements",
    "ATC": "drug classes",
    "RxNorm": "drugs",
    "RxNorm Extension": "drugs",
    "NDC": "drug packages",
    "SPL": "drug labels",
    "dm+d": "drugs",
    "CVX": "vaccines",
    "NDFRT": "drug classes",
    "VA Class": "drug classes",
    "CPT4": "procedures",
    "HCPCS": "procedures and supplies",
    "ICD10PCS": "procedures",
    "ICD9Proc": "procedures",
    "UCUM": "units",
    "Gender": "demographics",
    "Race": "demographics",
    "Ethnicity": "demographics",
    "Visit": "visit types",
    "Specialty": "provider specialties",
}
"""Vocabularies whose concepts are not diagnoses, so no ICD-10-CM code can stand for them."""

DEFAULT_FANOUT_THRESHOLD = 100


def _skip(item: ConceptItem, reason: str) -> SkippedItem:
    return SkippedItem(
        concept_id=item.concept_id,
        code=item.code,
        vocabulary_id=item.vocabulary_id,
        name=item.name,
        reason=reason,
    )


def _ids_param(ids: Iterable[int]) -> list[int]:
    return sorted({int(concept_id) for concept_id in ids})


def _concepts(
    con: duckdb.DuckDBPyConnection, ids: Iterable[int]
) -> dict[int, tuple[str, str, str, str | None, str | None]]:
    """concept_id -> (vocabulary_id, code, name, standard_concept, domain_id) for loaded ids."""
    wanted = _ids_param(ids)
    if not wanted:
        return {}
    rows = con.execute(
        "SELECT concept_id, vocabulary_id, code, name, standard_concept, domain_id FROM concept "
        "WHERE concept_id IN (SELECT unnest(?::BIGINT[]))",
        [wanted],
    ).fetchall()
    return {int(row[0]): (row[1], row[2], row[3], row[4], row[5]) for row in rows}


def _descendants(con: duckdb.DuckDBPyConnection, ids: Iterable[int]) -> dict[int, set[int]]:
    """ancestor -> itself and every descendant in CONCEPT_ANCESTOR (a DAG: diamonds count once)."""
    wanted = _ids_param(ids)
    found: dict[int, set[int]] = {concept_id: {concept_id} for concept_id in wanted}
    if not wanted:
        return found
    rows = con.execute(
        "SELECT ancestor_id, descendant_id FROM concept_ancestor WHERE ancestor_id IN (SELECT unnest(?::BIGINT[]))",
        [wanted],
    ).fetchall()
    for ancestor, descendant in rows:
        found[int(ancestor)].add(int(descendant))
    return found


def _mapped_codes(con: duckdb.DuckDBPyConnection, ids: Iterable[int]) -> dict[int, set[str]]:
    """standard concept -> the ICD-10-CM codes whose 'Maps to' edge points at it."""
    wanted = _ids_param(ids)
    found: dict[int, set[str]] = {}
    if not wanted:
        return found
    rows = con.execute(
        "SELECT m.target_id, c.code FROM concept_map m JOIN concept c ON c.concept_id = m.source_id "
        "WHERE m.target_id IN (SELECT unnest(?::BIGINT[])) AND c.vocabulary_id = ?",
        [wanted, ICD10CM],
    ).fetchall()
    for target, code in rows:
        found.setdefault(int(target), set()).add(str(code))
    return found


def _has_vocabulary(con: duckdb.DuckDBPyConnection, vocabulary_id: str) -> bool:
    rows = con.execute("SELECT EXISTS (SELECT 1 FROM concept WHERE vocabulary_id = ?)", [vocabulary_id]).fetchall()
    return bool(rows[0][0])


def _out_of_scope_reason(vocabulary_id: str) -> str:
    what = NON_CONDITION_VOCABULARIES.get(vocabulary_id)
    if what is not None:
        return f"out of scope: {vocabulary_id} codes {what}, not diagnoses, so no ICD-10-CM code stands for them"
    return (
        f"out of scope: vocabulary {vocabulary_id or '(none)'} is not loaded; phenoforge maps "
        "SNOMED standard concepts to ICD-10-CM"
    )


def map_standard_items(
    con: duckdb.DuckDBPyConnection,
    items: list[ConceptItem],
    fanout_threshold: int = DEFAULT_FANOUT_THRESHOLD,
) -> Resolution:
    """ICD-10-CM codes for one concept set's non-ICD-10-CM items (excluded items included).

    ``includeDescendants`` expands through CONCEPT_ANCESTOR; excluded items (with descendants
    when flagged) leave the set before mapping; each remaining concept maps back through the
    ICD10CM 'Maps to' edges. ``excluded_codes`` are codes only the excluded concepts brought.
    """
    cursor = con.cursor()
    try:
        return _map(cursor, items, fanout_threshold)
    finally:
        cursor.close()


def _map(con: duckdb.DuckDBPyConnection, items: list[ConceptItem], fanout_threshold: int) -> Resolution:
    skipped: list[SkippedItem] = []
    unresolvable: list[str] = []
    in_scope: list[ConceptItem] = []
    for item in items:
        if item.vocabulary_id == ICD10CM:
            skipped.append(
                _skip(item, "ICD10CM items resolve through the ICD-10-CM tree, not through standard-concept mapping")
            )
        elif item.vocabulary_id not in MAPPABLE_VOCABULARIES:
            skipped.append(_skip(item, _out_of_scope_reason(item.vocabulary_id)))
        elif item.concept_id is None:
            skipped.append(_skip(item, "no CONCEPT_ID: a standard concept is looked up by id"))
        else:
            in_scope.append(item)
    if not in_scope:
        return Resolution(skipped=skipped)

    missing_vocabularies = {
        vocabulary for vocabulary in {item.vocabulary_id for item in in_scope} if not _has_vocabulary(con, vocabulary)
    }
    if missing_vocabularies:
        for item in [item for item in in_scope if item.vocabulary_id in missing_vocabularies]:
            skipped.append(
                _skip(
                    item,
                    (
                        f"the loaded vocabulary has no {item.vocabulary_id} concepts: load an Athena "
                        "download with `python -m phenoforge build --athena DIR` to map them"
                    ),
                )
            )
        in_scope = [item for item in in_scope if item.vocabulary_id not in missing_vocabularies]

    known = _concepts(con, (item.concept_id for item in in_scope if item.concept_id is not None))
    present: list[ConceptItem] = []
    for item in in_scope:
        assert item.concept_id is not None
        if item.concept_id in known:
            present.append(item)
        else:
            # Version drift: the cohort names a concept the user's Athena release lacks (or
            # holds only as deprecated, which the loader leaves out).
            unresolvable.append(f"{item.vocabulary_id} concept {item.concept_id}")

    expanded = _descendants(
        con, (item.concept_id for item in present if item.include_descendants and item.concept_id is not None)
    )

    def members(item: ConceptItem) -> set[int]:
        assert item.concept_id is not None
        return expanded.get(item.concept_id, {item.concept_id}) if item.include_descendants else {item.concept_id}

    included: set[int] = set()
    excluded: set[int] = set()
    for item in present:
        (excluded if item.is_excluded else included).update(members(item))
    kept = included - excluded

    mapped = _mapped_codes(con, included)
    groupers = {concept_id for concept_id, codes in mapped.items() if len(codes) > fanout_threshold}
    details = _concepts(con, groupers)
    for concept_id in sorted(groupers & kept):
        vocabulary, code, name, _standard, _domain = details[concept_id]
        skipped.append(
            SkippedItem(
                concept_id=concept_id,
                code=code,
                vocabulary_id=vocabulary,
                name=name,
                reason=(
                    f"broad grouper: {len(mapped[concept_id])} ICD-10-CM codes map to it, more "
                    f"than fanout_threshold={fanout_threshold}; skipped rather than flooding the set"
                ),
            )
        )

    def codes_of(concepts: set[int]) -> set[str]:
        found: set[str] = set()
        for concept_id in concepts - groupers:
            found |= mapped.get(concept_id, set())
        return found

    codes = codes_of(kept)
    excluded_codes = codes_of(included & excluded) - codes

    reported = set(groupers)
    for item in present:
        # (present items all have a concept id; the None test only narrows the type)
        if item.is_excluded or item.concept_id is None or item.concept_id in reported:
            continue
        own = members(item)
        if codes_of(own & kept):
            continue
        reported.add(item.concept_id)
        _vocabulary, _code, _name, standard, domain = known[item.concept_id]
        scope = " or its descendants" if item.include_descendants else ""
        if not own & kept:
            reason = "removed by an excluded item of the same concept set"
        elif not item.include_descendants and standard != "S":
            reason = (
                "non-standard concept: ICD10CM 'Maps to' edges point at standard concepts "
                "only; list its standard equivalent instead"
            )
        elif own & kept & groupers:
            reason = (
                f"only broad groupers (over fanout_threshold={fanout_threshold}) among "
                f"it{scope}; no other ICD-10-CM code maps to it{scope}"
            )
        else:
            reason = f"no ICD-10-CM code maps to it{scope} (domain {domain or 'unknown'})"
        skipped.append(_skip(item, reason))

    return Resolution(
        codes=sorted(codes, key=_sort_key),
        unresolvable=unresolvable,
        skipped=skipped,
        excluded_codes=sorted(excluded_codes, key=_sort_key),
    )


def _sort_key(code: str) -> tuple[str, str]:
    return code.replace(".", ""), code

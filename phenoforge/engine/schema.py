"""The one database schema every vocabulary source fills.

The embedded ICD-10-CM default and a user's Athena download load into the same tables, so search,
expansion, the benchmark and the dashboard never need to know which one they are reading.
"""

from __future__ import annotations

SCHEMA_VERSION = "1"

ICD10CM = "ICD10CM"

DDL: tuple[str, ...] = (
    """
    CREATE TABLE metadata (
        key VARCHAR PRIMARY KEY,
        value VARCHAR NOT NULL
    )
    """,
    # kind: chapter | block | category | subcategory | extension for ICD-10-CM nodes;
    # the Athena CONCEPT_CLASS_ID for other vocabularies. code_key is the lookup key
    # (upper case, no dot, no white space); code is the display form (dotted for ICD-10-CM).
    """
    CREATE TABLE concept (
        concept_id BIGINT PRIMARY KEY,
        vocabulary_id VARCHAR NOT NULL,
        code VARCHAR NOT NULL,
        code_key VARCHAR NOT NULL,
        name VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        billable BOOLEAN NOT NULL,
        standard_concept VARCHAR,
        domain_id VARCHAR,
        invalid_reason VARCHAR
    )
    """,
    # ICD-10-CM hierarchy edges (child 'Is a' parent); a child may have several parents.
    """
    CREATE TABLE concept_parent (
        child_id BIGINT NOT NULL,
        parent_id BIGINT NOT NULL
    )
    """,
    # note_type: inclusion_term | includes | notes | excludes1 | excludes2 | use_additional_code |
    # code_first | code_also | seven_chr_note
    """
    CREATE TABLE concept_note (
        concept_id BIGINT NOT NULL,
        note_type VARCHAR NOT NULL,
        text VARCHAR NOT NULL
    )
    """,
    # Athena CONCEPT_ANCESTOR rows (SNOMED and other standard vocabularies); empty for the default.
    """
    CREATE TABLE concept_ancestor (
        ancestor_id BIGINT NOT NULL,
        descendant_id BIGINT NOT NULL,
        min_levels INTEGER NOT NULL,
        max_levels INTEGER NOT NULL
    )
    """,
    # ICD-10-CM source concept 'Maps to' standard concept (Athena); empty for the default.
    """
    CREATE TABLE concept_map (
        source_id BIGINT NOT NULL,
        target_id BIGINT NOT NULL
    )
    """,
)

INDEXES: tuple[str, ...] = (
    "CREATE INDEX idx_concept_code_key ON concept (vocabulary_id, code_key)",
    "CREATE INDEX idx_parent_child ON concept_parent (child_id)",
    "CREATE INDEX idx_parent_parent ON concept_parent (parent_id)",
    "CREATE INDEX idx_note_concept ON concept_note (concept_id)",
    "CREATE INDEX idx_ancestor_ancestor ON concept_ancestor (ancestor_id)",
    "CREATE INDEX idx_map_target ON concept_map (target_id)",
)

SEARCHABLE_NOTE_TYPES: tuple[str, ...] = ("inclusion_term", "includes", "notes")
"""Notes that carry synonyms of the code itself (excludes notes name *other* conditions)."""

RETRIEVABLE_KINDS: tuple[str, ...] = ("category", "subcategory", "extension")
"""ICD-10-CM node kinds a retriever may return: real codes, not chapters or blocks."""

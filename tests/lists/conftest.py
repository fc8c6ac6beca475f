"""Versions over the fixture vocabulary: a reviewed assembly session, and drafts made by hand."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from phenoforge.agent import nodes
from phenoforge.agent.state import AssemblyState
from phenoforge.config import versions_dir
from phenoforge.engine.curated import load_library
from phenoforge.lists import store
from phenoforge.lists.store import VersionCode, VersionDraft, vocabulary_identity
from tests.agent.conftest import write_fixture_library


def draft(
    con: duckdb.DuckDBPyConnection,
    codes: list[str],
    reviewer: str = "Ann Reviewer",
    list_id: str = "hf-adults",
    based_on: int | None = None,
    note: str = "",
) -> VersionDraft:
    """A draft of ``codes`` (titles from the vocabulary), as a reviewer would sign it off."""
    from phenoforge.engine.expansion import lookup

    release, build, source = vocabulary_identity(con)
    entries = []
    for code in codes:
        concept = lookup(con, code)
        entries.append(
            VersionCode(
                code=code,
                name=concept.name if concept else "",
                provenance="fixlib/fix-HF",
                decision="curated",
                reason="'heart failure' matched 'Heart failure'",
            )
        )
    return VersionDraft(
        list_id=list_id,
        reviewer=reviewer,
        description="adults hospitalized with heart failure",
        note=note,
        method="assemble: decomposer offline, generator hybrid, k 10",
        based_on=based_on,
        vocabulary_release=release,
        vocabulary_build_id=build,
        vocabulary_source=source,
        codes=entries,
    )


@pytest.fixture
def reviewed_session(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> AssemblyState:
    """Asthma from a curated cohort; femur fracture generated: S72 accepted (without its subtree), the rest rejected."""
    library = write_fixture_library(tmp_path / "libraries" / "fixlib")
    state = nodes.new_state("adults with asthma or a femur fracture", "s42", reviewer="ann", library_paths=[library])
    state = nodes.decompose(state, lambda description: ["asthma", "fracture of femur"])
    state = nodes.check_curated(state, fixture_con, libraries=[load_library(library)])
    state = nodes.settle_proposal(state, "asthma", state.term_state("asthma").proposals[0].key, "ann")  # type: ignore[union-attr]
    state = nodes.generate(state, fixture_con)
    others = [c.code for c in state.candidates if c.code != "S72"]
    state = nodes.confirm(state, [("S72", "accept", False)] + [(code, "reject", False) for code in others], "ann")
    return nodes.assemble(state, fixture_con)


def forge_version(list_id: str, number: int, **changes: object) -> None:
    """The version file edited by hand, without the reviewer's key, its digest recomputed (as an older phenoforge
    or an editor would)."""
    path = versions_dir() / list_id / f"v{number:04d}.json"
    payload = json.loads(path.read_text())
    payload.update(changes)
    payload["digest"] = store._digest(payload)
    path.chmod(0o644)
    path.write_text(json.dumps(payload, ensure_ascii=False))

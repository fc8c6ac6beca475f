"""The assembly workflow as a few persisted steps, shared by the CLI and the dashboard page.

``start`` runs decompose -> check_curated -> generate and saves the session (with the description's
qualifiers no code expresses); ``decide`` applies reviewer decisions and writes them with the new state
in one transaction; ``settle`` confirms, replaces or declines a term's curated proposal; ``finish``
assembles the concept set, refused until a reviewer is named and every proposal is settled. Every step
reloads nothing it does not need and leaves the saved session consistent, so a restart resumes with :func:`resume`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from phenoforge.agent import audit, nodes
from phenoforge.agent.errors import DescriptionError
from phenoforge.agent.qualifiers import uncoded_qualifiers
from phenoforge.agent.state import QUALIFIER_ADVICE, AssemblyState, Decision
from phenoforge.console import printable as console_printable
from phenoforge.console import typed_text_problem
from phenoforge.engine.codes import codes_in_text, typed_as_code
from phenoforge.engine.curated import Library, list_libraries, load_library
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.setbuild.builders import builder_names

if TYPE_CHECKING:
    from phenoforge.engine.dense import DenseRetriever

Decomposer = Callable[[str], list[str]]

MAX_DESCRIPTION_CHARS = 4000
"""A population description is a few sentences; the session stores it once, so it is bounded."""


def generators() -> tuple[str, ...]:
    """What Assemble can generate candidates with: hybrid retrieval, or any registered set builder."""
    return ("hybrid", *builder_names())


_ORDINARY_WHITESPACE = frozenset("\t\n\r")
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def control_character(text: str) -> tuple[int, str] | None:
    """The first control character of ``text`` (position, ``U+XXXX``) other than tab and line breaks: an
    escape sequence echoed back to a terminal would run there, a bidi override would reorder the text."""
    for position, ch in enumerate(text, start=1):
        if ch in _BIDI_CONTROLS or (unicodedata.category(ch) == "Cc" and ch not in _ORDINARY_WHITESPACE):
            return position, f"U+{ord(ch):04X}"
    return None


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``), for echoing stored text safely."""
    return console_printable(text)


def check_description(description: object) -> str:
    """The description with its spacing tidied, or a ``DescriptionError`` that says what to type."""
    if isinstance(description, str) and (found := control_character(description)) is not None:
        position, code_point = found
        raise DescriptionError(
            f"the description holds a control character ({code_point} at character {position}), such as a "
            "terminal escape sequence; type plain text (tabs and line breaks are fine)"
        )
    if isinstance(description, str) and (problem := typed_text_problem(description, "description", True)):
        raise DescriptionError(problem)  # an undecodable byte (the one rule of phenoforge.console)
    text = " ".join(description.split()) if isinstance(description, str) else ""
    if not text:
        raise DescriptionError("describe the population first, e.g. 'adults hospitalized with heart failure'")
    if len(text) > MAX_DESCRIPTION_CHARS:
        raise DescriptionError(
            f"the description is {len(text):,} characters long; keep it under {MAX_DESCRIPTION_CHARS:,} "
            "(a few sentences naming the population's conditions)"
        )
    return text


def unknown_codes_notes(con: duckdb.DuckDBPyConnection, description: str) -> list[str]:
    """A note per code typed in ``description`` that the vocabulary does not know: no decomposer can turn it
    into a term, and dropping it without a word would hide a typo ("I50.99")."""
    hierarchy = get_hierarchy(con)
    return [
        f"{token} is not an ICD-10-CM code in this vocabulary, so nothing was searched for it: "
        "check the code, or name the condition in words"
        for token in dict.fromkeys(codes_in_text(description))
        if typed_as_code(token) and hierarchy.resolve(token) is None
    ]


def get_decomposer(name: str, model: str | None = None) -> Decomposer:
    """``offline`` (no key) or ``claude`` (raises MissingAPIKeyError without a key)."""
    if name == "offline":
        from phenoforge.agent.offline import offline_decomposer

        return offline_decomposer()
    if name == "claude":
        from phenoforge.agent.claude import default_decomposer

        return default_decomposer(model=model)
    raise ValueError(f"unknown decomposer {name!r}: choose offline or claude")


def start(
    con: duckdb.DuckDBPyConnection,
    description: str,
    decompose_fn: Decomposer,
    reviewer: str = "",
    decomposer_name: str = "offline",
    library_paths: Sequence[Path | str] | None = None,
    dense: DenseRetriever | None = None,
    k: int = nodes.DEFAULT_K,
    app_state_path: Path | None = None,
    generator: str = "hybrid",
) -> AssemblyState:
    """A new session up to the confirmation gate, saved.

    ``generator`` proposes codes for terms no curated cohort settles: ``hybrid`` (the top ``k``
    hits) or a set builder (``adaptive_cutoff``, ``subtree``, ``learned``).
    """
    description = check_description(description)
    if generator not in generators():
        raise ValueError(f"unknown generator {generator!r}; choose one of {', '.join(generators())}")
    broken: list[str] = []  # a broken library is reported in the session's notes and skipped
    libraries: list[Library] = (  # None: every installed library; []: no curated check at all
        list_libraries(errors=broken) if library_paths is None else [load_library(path) for path in library_paths]
    )
    state = nodes.new_state(
        description,
        audit.new_session_id(),
        reviewer=reviewer,
        decomposer=decomposer_name,
        library_paths=[library.path for library in libraries],
        k=k,
    )
    state.generator = generator
    state.notes.extend(f"library skipped: {problem}" for problem in broken)
    if not libraries:
        state.notes.append("no cohort library is checked: every term goes to generated retrieval")
    state = nodes.decompose(state, decompose_fn)
    state.notes.extend(unknown_codes_notes(con, description))
    state.qualifiers = uncoded_qualifiers(description, [term.term for term in state.terms])
    state = nodes.check_curated(state, con, dense=dense, libraries=libraries)
    state = nodes.generate(state, con, dense=dense)
    events = [
        audit.Event(code="", decision="qualifier", terms=f"{q.kind}: {q.text}", reason=QUALIFIER_ADVICE)
        for q in state.qualifiers
    ]
    audit.save_state(state, events=events, path=app_state_path)
    return state


def decide(
    state: AssemblyState,
    decisions: list[tuple[str, Decision, bool]],
    reviewer: str,
    app_state_path: Path | None = None,
    reason: str = "",
) -> AssemblyState:
    """Apply and record decisions atomically (state and audit rows in one transaction), each with ``reason``."""
    if not decisions:
        return state
    reviewer = nodes.check_reviewer(reviewer)
    new = nodes.confirm(state, decisions, reviewer, reason=reason)
    new = new.model_copy(update={"reviewer": reviewer})
    audit.save_state(
        new, decisions=[(code, decision, expand) for code, decision, expand in decisions], path=app_state_path
    )
    return new


def settle(
    state: AssemblyState,
    con: duckdb.DuckDBPyConnection,
    term: str,
    cohort: str | None,
    reviewer: str,
    reason: str = "",
    dense: DenseRetriever | None = None,
    app_state_path: Path | None = None,
) -> AssemblyState:
    """The reviewer confirms, replaces (``cohort``: ``library_id/cohort_id``) or declines (``None``: generated
    candidates are proposed for the term now) a term's curated proposal; saved with its audit row."""
    new = nodes.settle_proposal(state, term, cohort, reviewer, reason)
    if cohort is None:
        new = nodes.generate(new, con, dense=dense, only_terms={term})
    settled = new.term_state(term)
    assert settled is not None  # settle_proposal raised otherwise
    first = state.term_state(term)
    proposed_first = first.proposals[0].key if first is not None and first.proposals else ""
    if cohort is None:
        decision, code = "decline-cohorts", proposed_first
    else:
        picked = settled.curated.key if settled.curated is not None else cohort
        decision, code = ("confirm-cohort" if picked == proposed_first else "replace-cohort"), picked
    event = audit.Event(
        code=code,
        decision=decision,
        terms=term,
        reason=settled.settlement or "",
        reviewer=new.reviewer,
        decided_at=new.updated_at,
    )
    audit.save_state(new, events=[event], path=app_state_path)
    return new


def finish(state: AssemblyState, con: duckdb.DuckDBPyConnection, app_state_path: Path | None = None) -> AssemblyState:
    """The concept set, only once the gate is passed: a named reviewer, every curated proposal settled."""
    problems = nodes.gate_problems(state)
    if problems:
        raise nodes.GateError("the list cannot leave Assemble yet: " + "; ".join(problems))
    new = nodes.assemble(state, con)
    audit.save_state(new, path=app_state_path)
    return new


def with_reviewer(state: AssemblyState, reviewer: str, app_state_path: Path | None = None) -> AssemblyState:
    """The session with its reviewer named (refused when the name is blank), saved."""
    new = state.model_copy(update={"reviewer": nodes.check_reviewer(reviewer)})
    audit.save_state(new, path=app_state_path)
    return new


def resume(session_id: str, app_state_path: Path | None = None) -> AssemblyState:
    return upgrade(audit.load_state(session_id, path=app_state_path))


def upgrade(state: AssemblyState) -> AssemblyState:
    """A session saved before curated matches were proposals: a cohort taken without a reviewer, or an
    ambiguous term, becomes a proposal again (the reviewer settles it like any other)."""
    terms = []
    for term in state.terms:
        if term.status in ("curated", "ambiguous") and not term.settled_by and not term.proposals:
            offered = [*([term.curated] if term.curated is not None else []), *term.ambiguous]
            if offered:
                proposals = [match.model_copy(update={"rank": rank}) for rank, match in enumerate(offered, 1)]
                term = term.model_copy(
                    update={"status": "proposed", "proposals": proposals, "curated": None, "ambiguous": []}
                )
        terms.append(term)
    return state.model_copy(update={"terms": terms})

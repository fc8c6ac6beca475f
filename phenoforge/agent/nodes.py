"""The assembly nodes: ``decompose -> check_curated -> generate -> confirm -> assemble``.

Each node takes the :class:`AssemblyState` and returns a new one (the input is not mutated), so
the CLI, the dashboard page and the decomposition eval drive the same code.

The curated-match rule (``check_curated``). A term matches a bundled cohort when two independent
signals agree:

* retrieval: the term's top-k hybrid hits inside the cohort's resolved codes (a category hit
  counts when at least half the codes below it do), divided by ``min(k, cohort size)`` so a
  one-code cohort can match, reach ``RETRIEVAL_THRESHOLD``; and
* names: at least ``NAME_THRESHOLD`` of the term's content words (query tokenizer, stop words and
  generic words such as "disease" dropped, light plural folding, kidney/renal-style synonyms
  merged) appear in the cohort name.

The name signal also counts the term's head, the part before " with ": ICD-10-CM and clinical
usage name a condition first and what complicates or qualifies it after "with" ("heart failure with
reduced ejection fraction" is a heart failure), so a cohort named for the head names the term.

A cohort name can be broader than the term ("Specified heart arrhythmias" for "atrial fibrillation")
and share none of its words. When no cohort passes both signals, a cohort holding at least
``STRONG_RETRIEVAL`` of the term's own top-k hits (counted over the hits, so a one-code cohort cannot
reach it with one hit) is a match on retrieval alone, if it is the only such cohort; it is marked
``by_retrieval_only`` and the term's note says so.

No match is taken by itself: a term with matches is *proposed*, its matches and the cohorts named for
it (``name_alternatives``) ranked by scope (``agent/scope.py``), and the reviewer confirms the first,
replaces it or declines them all (``settle_proposal``). Unmatched and declined terms go to generated
retrieval; ``workflow.finish`` refuses until every proposal is settled and a reviewer is named.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from phenoforge.agent.scope import describe_scope
from phenoforge.agent.state import (
    AssemblyState,
    Candidate,
    CandidateSource,
    CohortMatch,
    ConceptEntry,
    ConceptSet,
    Decision,
    TermState,
    UnmappableTerm,
)
from phenoforge.agent.words import content_words
from phenoforge.caches import ProcessCache
from phenoforge.console import typed_text_problem
from phenoforge.engine.curated import Library, list_libraries, load_curated_concept_set, load_library
from phenoforge.engine.db import build_id
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.engine.hybrid import hybrid_search
from phenoforge.errors import LibraryError, PhenoforgeError
from phenoforge.setbuild.builders import builder_names

if TYPE_CHECKING:
    from phenoforge.engine.dense import DenseRetriever

RETRIEVAL_THRESHOLD = 0.5
NAME_THRESHOLD = 0.5
STRONG_RETRIEVAL = 0.65
"""Share of a term's hits inside one cohort that matches it without the name signal. Chosen on the
decomposition development cases only (0.8 and 0.65 landed no term on a wrong cohort there, 0.65 one more
on its target; 0.5 sent "metastatic breast cancer" to solid tumours); test and held-out cases are reported."""
DEFAULT_K = 10

Decomposer = Callable[[str], list[str]]


@dataclass(frozen=True)
class IndexedCohort:
    library_id: str
    library_path: str
    cohort_id: str
    cohort_name: str
    codes: frozenset[str]
    ordered_codes: tuple[str, ...]
    words: frozenset[str]


_INDEX: ProcessCache[tuple[str, str, str], tuple[list[IndexedCohort], list[str]]] = ProcessCache("cohort name index")
_INDEX_LOCK = threading.Lock()


def index_library(
    con: duckdb.DuckDBPyConnection, library: Library, fanout_threshold: int = 100, problems: list[str] | None = None
) -> list[IndexedCohort]:
    """Every cohort of ``library`` with its resolved codes; cached per library build and vocabulary.

    A cohort whose file is broken cannot match: it is left out and its error appended to ``problems``.
    """
    cursor = con.cursor()
    try:
        key = (str(library.path.resolve()), library.manifest.created_at, build_id(cursor))
        with _INDEX_LOCK:
            cached = _INDEX.get(key)
        if cached is not None:
            if problems is not None:
                problems.extend(cached[1])
            return cached[0]
        cohorts: list[IndexedCohort] = []
        broken: list[str] = []
        for entry in library.manifest.cohorts:
            try:
                curated = load_curated_concept_set(cursor, library.path, entry.cohort_id, fanout_threshold)
            except LibraryError as error:
                broken.append(f"cohort {library.library_id}/{entry.cohort_id} is skipped: {error}")
                continue
            cohorts.append(
                IndexedCohort(
                    library_id=library.library_id,
                    library_path=str(library.path),
                    cohort_id=entry.cohort_id,
                    cohort_name=entry.cohort_name,
                    codes=frozenset(curated.codes),
                    ordered_codes=tuple(curated.codes),
                    words=frozenset(content_words(entry.cohort_name)),
                )
            )
    finally:
        cursor.close()
    with _INDEX_LOCK:
        _INDEX[key] = (cohorts, broken)
    if problems is not None:
        problems.extend(broken)
    return cohorts


def cohort_codes(con: duckdb.DuckDBPyConnection, library_path: str, cohort_id: str) -> list[str]:
    for cohort in index_library(con, load_library(library_path)):
        if cohort.cohort_id == cohort_id:
            return list(cohort.ordered_codes)
    raise LibraryError(f"cohort {cohort_id!r} is not in the library at {library_path}")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _libraries(state: AssemblyState, problems: list[str] | None = None) -> list[Library]:
    if state.library_paths:
        return [load_library(path) for path in state.library_paths]
    return list_libraries(errors=problems if problems is not None else [])


# --- nodes ---------------------------------------------------------------------------------


def decompose(state: AssemblyState, decompose_fn: Decomposer) -> AssemblyState:
    """Seed terms from the description; decomposer errors propagate (typed, readable)."""
    terms = decompose_fn(state.description)
    seen: set[str] = set()
    states: list[TermState] = []
    for term in terms:
        clean = " ".join(str(term).split())
        if clean and clean.lower() not in seen:
            seen.add(clean.lower())
            states.append(TermState(term=clean))
    notes = list(state.notes)
    if not states:
        notes.append("the decomposer found no clinical condition in the description")
    return state.model_copy(update={"terms": states, "stage": "decomposed", "notes": notes, "updated_at": _now()})


def _inside(code: str, codes: frozenset[str], below: dict[str, list[str]]) -> bool:
    if code in codes:
        return True
    descendants = below.get(code, [])
    return bool(descendants) and sum(1 for item in descendants if item in codes) * 2 >= len(descendants)


def match_term(
    con: duckdb.DuckDBPyConnection,
    term: str,
    cohorts: list[IndexedCohort],
    hit_codes: list[str],
) -> tuple[list[CohortMatch], list[CohortMatch]]:
    """``(matches, near_misses)`` of one term against indexed cohorts, per the module rule."""
    hierarchy = get_hierarchy(con)
    below: dict[str, list[str]] = {}
    for code in hit_codes:
        node = hierarchy.resolve(code)
        if node is not None:
            below[code] = [hierarchy.code[item] for item in hierarchy.descendants(node)]
    words = content_words(term)
    head = content_words(term.split(" with ", 1)[0]) if " with " in term else words
    matches: list[CohortMatch] = []
    scored: list[tuple[float, CohortMatch]] = []
    strong: list[CohortMatch] = []
    for cohort in cohorts:
        name_overlap = _overlap(words, cohort.words)
        if head is not words:
            name_overlap = max(name_overlap, _overlap(head, cohort.words))
        inside = 0
        if hit_codes and (name_overlap > 0 or cohort.codes & set(hit_codes)):
            inside = sum(1 for code in hit_codes if _inside(code, cohort.codes, below))
            retrieval = min(1.0, inside / min(len(hit_codes), max(len(cohort.codes), 1)))
        else:
            retrieval = 0.0
        if name_overlap == 0 and retrieval == 0:
            continue
        match = CohortMatch(
            library_id=cohort.library_id,
            library_path=cohort.library_path,
            cohort_id=cohort.cohort_id,
            cohort_name=cohort.cohort_name,
            retrieval_overlap=round(retrieval, 4),
            name_overlap=round(name_overlap, 4),
            exact_name=bool(words) and words == set(cohort.words),
            n_codes=len(cohort.codes),
        )
        if retrieval >= RETRIEVAL_THRESHOLD and name_overlap >= NAME_THRESHOLD:
            matches.append(match)
        else:
            if hit_codes and inside >= STRONG_RETRIEVAL * len(hit_codes):
                strong.append(match)
            scored.append((retrieval + name_overlap, match))
    if not matches and len(strong) == 1:
        only = strong[0].model_copy(update={"by_retrieval_only": True})
        return [only], [match for _score, match in sorted(scored, key=lambda p: -p[0]) if match is not strong[0]][:3]
    scored.sort(key=lambda pair: -pair[0])
    return matches, [match for _score, match in scored[:3]]


def _overlap(words: set[str], cohort_words: frozenset[str]) -> float:
    return len(words & cohort_words) / len(words) if words else 0.0


def check_curated(
    state: AssemblyState,
    con: duckdb.DuckDBPyConnection,
    dense: DenseRetriever | None = None,
    libraries: list[Library] | None = None,
    fanout_threshold: int = 100,
) -> AssemblyState:
    """Curated first: each term either matches one bundled cohort, several (ambiguous), or none."""
    problems: list[str] = []
    libraries = libraries if libraries is not None else _libraries(state, problems)
    cohorts = [cohort for library in libraries for cohort in index_library(con, library, fanout_threshold, problems)]
    codes_of = {f"{cohort.library_id}/{cohort.cohort_id}": cohort.codes for cohort in cohorts}
    terms: list[TermState] = []
    for term_state in state.terms:
        result = hybrid_search(con, term_state.term, k=state.k, dense=dense)
        hit_codes = result.codes
        matches, near = match_term(con, term_state.term, cohorts, hit_codes)
        update: dict[str, object] = {"near_misses": near, "search_degraded": result.degraded}
        if matches:
            alternatives = name_alternatives(term_state.term, cohorts, matches)
            proposals = describe_scope(con, term_state.term, [*matches, *alternatives], codes_of, hit_codes)
            update |= {
                "status": "proposed",
                "proposals": proposals,
                "curated": None,
                "ambiguous": [],
                "note": _proposal_note(matches, alternatives, proposals, state.k),
            }
        else:
            update |= {"status": "pending", "curated": None, "ambiguous": [], "proposals": []}
        terms.append(term_state.model_copy(update=update))
    notes = list(state.notes) + [
        f"{problem} (its terms fall through to generated candidates)"
        for problem in problems
        if problem not in state.notes
    ]
    return state.model_copy(update={"terms": terms, "stage": "checked", "updated_at": _now(), "notes": notes})


def name_alternatives(term: str, cohorts: list[IndexedCohort], matches: list[CohortMatch]) -> list[CohortMatch]:
    """Cohorts that did not pass the match rule but whose name holds every content word of the term (or of
    its head before " with "): other scopes of the same condition ("Hypertension, uncomplicated" when only
    the complicated cohort's codes fill the term's top hits), offered beside the matches."""
    words = content_words(term)
    head = content_words(term.split(" with ", 1)[0]) if " with " in term else words
    taken = {(match.library_id, match.cohort_id) for match in matches}
    out: list[CohortMatch] = []
    for cohort in cohorts:
        if (cohort.library_id, cohort.cohort_id) in taken or not words:
            continue
        overlap = max(_overlap(words, cohort.words), _overlap(head, cohort.words) if head else 0.0)
        if overlap < 1.0:
            continue
        out.append(
            CohortMatch(
                library_id=cohort.library_id,
                library_path=cohort.library_path,
                cohort_id=cohort.cohort_id,
                cohort_name=cohort.cohort_name,
                retrieval_overlap=0.0,
                name_overlap=round(overlap, 4),
                exact_name=words == set(cohort.words),
                n_codes=len(cohort.codes),
                matched=False,
            )
        )
    return out


def _proposal_note(
    matches: list[CohortMatch], alternatives: list[CohortMatch], proposals: list[CohortMatch], k: int
) -> str:
    first = proposals[0]
    said = [
        f"{len(matches)} cohort{'s' if len(matches) != 1 else ''} matched"
        + (f", {len(alternatives)} more named for the term" if alternatives else "")
        + f"; proposed first: {first.key} '{first.cohort_name}' (the reviewer confirms or replaces it)"
    ]
    only = next((match for match in matches if match.by_retrieval_only), None)
    if only is not None:
        said.append(
            f"'{only.cohort_name}' matched on retrieval alone: no cohort name shares the term's words, and "
            f"{only.retrieval_overlap:.0%} of its top-{k} hits are in this one cohort only"
        )
    return "; ".join(said)


def _hint(con: duckdb.DuckDBPyConnection, code: str) -> tuple[str, int, str, bool]:
    """``(hierarchy hint, number of codes below, kind, billable)`` for a candidate."""
    hierarchy = get_hierarchy(con)
    node = hierarchy.resolve(code)
    if node is None:
        return "not in the loaded vocabulary", 0, "", False
    below = len(hierarchy.descendants(node))
    parents = hierarchy.parents.get(node, ())
    parent = f"under {hierarchy.code[parents[0]]} {hierarchy.name[parents[0]]}" if parents else "top level"
    kind = hierarchy.kind[node]
    shape = f"{kind} with {below} code{'s' if below != 1 else ''} below" if below else f"{kind}, no codes below"
    return f"{shape}; {parent}", below, kind, hierarchy.billable[node]


def generate(
    state: AssemblyState,
    con: duckdb.DuckDBPyConnection,
    dense: DenseRetriever | None = None,
    only_terms: set[str] | None = None,
) -> AssemblyState:
    """Hybrid retrieval (plus hierarchy hints) for every term the curated check did not settle (or only
    ``only_terms``: a term whose curated proposals the reviewer declined)."""
    # copies: appending a source below must not reach the caller's state (nodes never mutate their input)
    by_code: dict[str, Candidate] = {
        candidate.code: candidate.model_copy(update={"sources": list(candidate.sources)})
        for candidate in state.candidates
    }
    terms: list[TermState] = []
    for term_state in state.terms:
        if term_state.status not in ("pending", "ambiguous", "generated") or (
            only_terms is not None and term_state.term not in only_terms
        ):
            terms.append(term_state)
            continue
        if state.generator != "hybrid":
            terms.append(_generate_set(state, term_state, con, dense, by_code))
            continue
        result = hybrid_search(con, term_state.term, k=state.k, dense=dense)
        if not result.hits:
            terms.append(
                term_state.model_copy(
                    update={
                        "status": "unmappable" if term_state.status == "pending" else term_state.status,
                        "search_reason": result.reason or "retrieval returned nothing",
                    }
                )
            )
            continue
        for hit in result.hits:
            sub = ", ".join(f"{p.retriever} #{p.rank}" for p in hit.provenance if p.retriever != "hybrid")
            source = CandidateSource(
                term=term_state.term, retriever=result.method, rank=hit.rank, score=hit.score, detail=sub
            )
            _propose(by_code, con, hit.code, hit.name, source)
        terms.append(
            term_state.model_copy(
                update={
                    "status": "generated" if term_state.status == "pending" else term_state.status,
                    "candidate_codes": result.codes,
                    "search_degraded": result.degraded,
                }
            )
        )
    return state.model_copy(
        update={
            "terms": terms,
            "candidates": list(by_code.values()),
            "stage": "generated",
            "updated_at": _now(),
        }
    )


def _propose(
    by_code: dict[str, Candidate], con: duckdb.DuckDBPyConnection, code: str, name: str, source: CandidateSource
) -> None:
    """Add ``code`` as a candidate, or add ``source`` to it when another term already proposed it."""
    existing = by_code.get(code)
    if existing is None:
        hint, below, kind, billable = _hint(con, code)
        by_code[code] = Candidate(
            code=code,
            name=name,
            kind=kind,
            billable=billable,
            sources=[source],
            hierarchy_hint=hint,
            n_descendants=below,
        )
    elif all(s.term != source.term for s in existing.sources):
        existing.sources.append(source)


def _generate_set(
    state: AssemblyState,
    term_state: TermState,
    con: duckdb.DuckDBPyConnection,
    dense: DenseRetriever | None,
    by_code: dict[str, Candidate],
) -> TermState:
    """A set builder's billable list for one term, each code a candidate with the builder's reason."""
    from phenoforge.methods.set_building import build_for_free_query, describe

    built = build_for_free_query(con, state.generator, term_state.term, dense)
    if not built.codes:
        reason = "; ".join([*built.notes, *([built.fallback] if built.fallback else [])]) or "the builder kept nothing"
        return term_state.model_copy(
            update={
                "status": "unmappable" if term_state.status == "pending" else term_state.status,
                "search_reason": f"{state.generator}: {reason}",
            }
        )
    for rank, item in enumerate(built.codes, start=1):
        source = CandidateSource(
            term=term_state.term,
            retriever=state.generator,
            rank=rank,
            score=item.provenance.score,
            detail=describe(item.provenance),
        )
        _propose(by_code, con, item.code, item.name, source)
    return term_state.model_copy(
        update={
            "status": "generated" if term_state.status == "pending" else term_state.status,
            "candidate_codes": built.code_list,
            "search_degraded": dense is None,
            "note": f"{state.generator}: {len(built.codes)} billable codes, fitted on "
            f"{', '.join(built.trained_on) or 'nothing'}"
            + "".join(f"; {said}" for said in [*built.notes, *([built.fallback] if built.fallback else [])]),
        }
    )


def check_reason(reason: str) -> str:
    """A decision's reason, on one line; control characters and undecodable bytes refused (``GateError``)."""
    problem = typed_text_problem(reason, "reason")
    if problem is not None:
        raise GateError(problem)
    return reason


def confirm(
    state: AssemblyState,
    decisions: list[tuple[str, Decision, bool]],
    reviewer: str,
    when: str | None = None,
    reason: str = "",
) -> AssemblyState:
    """Apply reviewer decisions ``(code, 'accept'|'reject', expand_descendants)`` to candidates, each with
    ``reason`` (one action, one reason; kept in the audit trail and the exports)."""
    reviewer = check_reviewer(reviewer)
    reason = check_reason(reason)
    when = when or _now()
    wanted = {code: (decision, expand) for code, decision, expand in decisions}
    unknown = set(wanted) - {candidate.code for candidate in state.candidates}
    if unknown:
        raise ValueError(f"not a candidate in this session: {', '.join(sorted(unknown))}")
    candidates = []
    for candidate in state.candidates:
        if candidate.code in wanted:
            decision, expand = wanted[candidate.code]
            candidate = candidate.model_copy(
                update={
                    "decision": decision,
                    "expand_descendants": bool(expand) and decision == "accept" and candidate.n_descendants > 0,
                    "reviewer": reviewer.strip(),
                    "decided_at": when,
                    "reason": " ".join(reason.split()),
                }
            )
        candidates.append(candidate)
    return state.model_copy(update={"candidates": candidates, "stage": "confirming", "updated_at": when})


class GateError(PhenoforgeError, ValueError):
    """The human gate refuses: no reviewer named, or a proposal not settled (the message says which)."""


def check_reviewer(reviewer: object) -> str:
    """The reviewer's name, stripped; a name of only spaces (or none), or one holding control characters or
    undecodable bytes (:func:`phenoforge.console.typed_text_problem`), is refused with what to do."""
    if isinstance(reviewer, str) and (problem := typed_text_problem(reviewer.strip(" \t"), "reviewer name")):
        raise GateError(problem)
    name = " ".join(reviewer.split()) if isinstance(reviewer, str) else ""
    if not name:
        said = "a name of only spaces is not a name" if isinstance(reviewer, str) and reviewer else "no name given"
        raise GateError(f"a reviewer name is required ({said}): every list that leaves Assemble names who reviewed it")
    return name


def settle_proposal(
    state: AssemblyState,
    term: str,
    cohort: str | None,
    reviewer: str,
    reason: str = "",
    when: str | None = None,
) -> AssemblyState:
    """The reviewer confirms the proposed cohort of ``term``, replaces it with another proposal (``cohort`` is
    ``library_id/cohort_id``, or a bare cohort id when unique), or declines them all (``cohort=None``: the term
    goes to generated candidates, which :func:`generate` then proposes). Recorded on the term."""
    reviewer = check_reviewer(reviewer)
    when = when or _now()
    found = state.term_state(term)
    if found is None:
        raise GateError(f"'{term}' is not a term of this session")
    proposals = found.proposals
    if not proposals:
        raise GateError(f"'{term}' has no curated proposal to settle")
    reason = " ".join(check_reason(reason).split())
    because = f" ({reason})" if reason else ""
    if cohort is None:
        update: dict[str, object] = {
            "status": "pending",
            "curated": None,
            "settled_by": reviewer,
            "settlement": f"declined the {len(proposals)} curated proposals; generated candidates instead{because}",
        }
    else:
        picked = next((m for m in proposals if m.key == cohort), None) or _by_bare_id(proposals, cohort)
        if picked is None:
            raise GateError(
                f"{cohort!r} is not one of the cohorts proposed for '{term}': "
                + ", ".join(match.key for match in proposals)
            )
        first = proposals[0]
        said = (
            f"confirmed the proposed cohort {picked.key} '{picked.cohort_name}'"
            if picked.key == first.key
            else f"replaced the proposed {first.key} '{first.cohort_name}' with {picked.key} '{picked.cohort_name}'"
        )
        update = {"status": "curated", "curated": picked, "settled_by": reviewer, "settlement": said + because}
    update["settle_reason"] = reason
    terms = [t.model_copy(update=update) if t.term == term else t for t in state.terms]
    candidates = state.candidates
    if cohort is not None:  # settled: its undecided candidates leave the gate unless another term shares them
        candidates = []
        for candidate in state.candidates:
            others = [source for source in candidate.sources if source.term != term]
            if others or candidate.decision is not None:
                candidates.append(
                    candidate if candidate.decision is not None else candidate.model_copy(update={"sources": others})
                )
    return state.model_copy(update={"terms": terms, "candidates": candidates, "reviewer": reviewer, "updated_at": when})


def _by_bare_id(proposals: list[CohortMatch], cohort_id: str) -> CohortMatch | None:
    same = [match for match in proposals if match.cohort_id == cohort_id]
    return same[0] if len(same) == 1 else None


def gate_problems(state: AssemblyState) -> list[str]:
    """Why the list cannot leave Assemble yet (empty: it can): no reviewer, or proposals not settled."""
    problems: list[str] = []
    if not state.reviewer.strip():
        problems.append("name the reviewer: every list that leaves Assemble names who reviewed it")
    for term in state.unsettled:
        problems.append(
            f"confirm or replace the curated cohort proposed for '{term.term}' (or decline it for generated candidates)"
        )
    return problems


def assemble(state: AssemblyState, con: duckdb.DuckDBPyConnection) -> AssemblyState:
    """The final concept set: curated codes, accepted candidates (and subtrees), unmappable terms."""
    hierarchy = get_hierarchy(con)
    entries: dict[str, ConceptEntry] = {}
    unmappable: list[UnmappableTerm] = []
    roots: list[str] = []

    def add(entry: ConceptEntry) -> None:
        existing = entries.get(entry.code)
        if existing is None:
            entries[entry.code] = entry
        else:
            for term in entry.terms:
                if term not in existing.terms:
                    existing.terms.append(term)

    def name_of(code: str) -> str:
        node = hierarchy.resolve(code)
        return hierarchy.name[node] if node is not None else ""

    for term_state in state.terms:
        match = term_state.curated
        if term_state.status == "curated" and match is not None:
            evidence = (
                f"'{term_state.term}' -> '{match.cohort_name}': {match.name_overlap:.0%} of the term's "
                f"words in the cohort name, {match.retrieval_overlap:.0%} of its top-{state.k} hits in the cohort"
            )
            if term_state.settled_by:
                evidence += f"; {term_state.settled_by} {term_state.settlement}"
            decision = "replace-cohort" if (term_state.settlement or "").startswith("replaced") else "confirm-cohort"
            for code in cohort_codes(con, match.library_path, match.cohort_id):
                add(
                    ConceptEntry(
                        code=code,
                        name=name_of(code),
                        tier="curated",
                        source=f"{match.library_id}/{match.cohort_id}",
                        evidence=evidence,
                        terms=[term_state.term],
                        decision=decision,
                        reason=term_state.settle_reason,
                    )
                )
    for candidate in state.candidates:
        if candidate.decision != "accept":
            continue
        best = min(candidate.sources, key=lambda source: source.rank)
        evidence = f"accepted by {candidate.reviewer} at {candidate.decided_at}"
        if best.retriever in builder_names() and best.detail:
            evidence = f"{best.detail}; {evidence}"
        add(
            ConceptEntry(
                code=candidate.code,
                name=candidate.name,
                tier="generated",
                source=f"{best.retriever} rank {best.rank} for '{best.term}'",
                evidence=evidence,
                terms=candidate.terms,
                decision="accept with descendants" if candidate.expand_descendants else "accept",
                reason=candidate.reason,
            )
        )
        if candidate.expand_descendants:
            node = hierarchy.resolve(candidate.code)
            if node is not None:
                roots.append(candidate.code)
                for child in hierarchy.descendants(node):
                    code = hierarchy.code[child]
                    add(
                        ConceptEntry(
                            code=code,
                            name=hierarchy.name[child],
                            tier="generated",
                            source=f"descendant of {candidate.code}",
                            evidence=f"{evidence}, with all codes below {candidate.code}",
                            terms=candidate.terms,
                            via_descendants_of=candidate.code,
                            decision=f"accept {candidate.code} with descendants",
                            reason=candidate.reason,
                        )
                    )
    for term_state in state.terms:
        if term_state.status == "curated":
            continue
        mine = [c for c in state.candidates if term_state.term in c.terms]
        accepted = [c for c in mine if c.decision == "accept"]
        if accepted:
            continue
        if term_state.status == "unmappable":
            reason = f"retrieval found nothing: {term_state.search_reason}"
        elif term_state.status == "ambiguous":
            names = "; ".join(f"{m.library_id}/{m.cohort_id}" for m in term_state.ambiguous)
            reason = f"ambiguous between cohorts ({names}); none chosen and no generated candidate accepted"
        elif term_state.status == "proposed":
            reason = "its curated proposal was not confirmed or replaced"
        elif mine and all(c.decision == "reject" for c in mine):
            reason = f"all {len(mine)} generated candidates were rejected by the reviewer"
        elif mine:
            reason = f"{sum(1 for c in mine if c.decision is None)} candidates not reviewed yet; none accepted"
        else:
            reason = "no curated match and no generated candidates"
        unmappable.append(UnmappableTerm(term=term_state.term, reason=reason))
    if not state.terms:
        unmappable.append(UnmappableTerm(term=state.description, reason="no clinical condition was extracted"))
    concept_set = ConceptSet(
        description=state.description,
        entries=list(entries.values()),
        unmappable=unmappable,
        descendant_roots=roots,
        reviewer=state.reviewer,
        qualifiers=state.qualifiers,
    )
    return state.model_copy(update={"concept_set": concept_set, "stage": "assembled", "updated_at": _now()})


def new_state(
    description: str,
    session_id: str,
    reviewer: str = "",
    decomposer: str = "offline",
    library_paths: list[Path | str] | None = None,
    k: int = DEFAULT_K,
) -> AssemblyState:
    now = _now()
    return AssemblyState(
        session_id=session_id,
        description=" ".join(description.split()),
        reviewer=reviewer,
        decomposer=decomposer,
        library_paths=[str(path) for path in library_paths or []],
        k=k,
        created_at=now,
        updated_at=now,
    )


def run_ungated(
    con: duckdb.DuckDBPyConnection,
    description: str,
    decompose_fn: Decomposer,
    libraries: list[Library],
    dense: DenseRetriever | None = None,
    k: int = DEFAULT_K,
    fanout_threshold: int = 100,
) -> AssemblyState:
    """The pipeline minus the human gate (every first curated proposal confirmed, every candidate accepted):
    what the eval measures."""
    state = new_state(description, session_id="eval", reviewer="eval", k=k)
    state = decompose(state, decompose_fn)
    state = check_curated(state, con, dense=dense, libraries=libraries, fanout_threshold=fanout_threshold)
    for term in state.terms:  # the reviewer confirms every first proposal
        if term.status == "proposed":
            state = settle_proposal(state, term.term, term.proposals[0].key, reviewer="eval", when=state.updated_at)
    state = generate(state, con, dense=dense)
    state = (
        confirm(state, [(c.code, "accept", False) for c in state.candidates], reviewer="eval", when=state.updated_at)
        if state.candidates
        else state
    )
    return assemble(state, con)

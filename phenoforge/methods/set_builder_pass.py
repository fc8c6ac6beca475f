"""Building sets for a run's queries: one shared pass over blocks of queries serves every set builder.

Each block's candidate tables are built once and dropped; the learned builder predicts a block in one
model call, in the scored library's context; a plug-in builder's failure in the pass is its own."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from phenoforge.engine.codes import single_code_token
from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import Hierarchy
from phenoforge.engine.query import query_problem
from phenoforge.errors import LibraryError
from phenoforge.methods.base import MethodContext
from phenoforge.methods.set_builder_fits import scored_group
from phenoforge.methods.set_builder_run import _Prepared, _run
from phenoforge.setbuild.api import (
    FittedBuilders,
    build_set,
    candidate_table,
    robust_query,
)
from phenoforge.setbuild.builders import (
    builder_class,
    builder_names,
    is_plugin,
    with_requirements,
)
from phenoforge.setbuild.candidates import (
    AGREEMENT_DEPTH,
    FUSION_DEPTH,
    RETRIEVAL_DEPTH,
    CandidateTable,
    RankedIds,
    ranked_rows,
)
from phenoforge.setbuild.context import LibraryContext, name_signature, signature_of
from phenoforge.setbuild.learned import learned_features, predict_many
from phenoforge.setbuild.models import BuiltSet

LEARNED = "learned"

FITTED_DENSE_WEIGHT = 0.5
"""The fusion weight the builders are fitted and run at (their features read the fused ranking)."""


def _prepare(context: MethodContext, query: str) -> _Prepared:
    """Typo correction, umbrellas, deep rankings and the candidate table: once per query per run."""
    memo = _run(context).prepared
    if query not in memo:
        memo[query] = _prepared(context, query)
    return memo[query]


def _prepared(context: MethodContext, query: str) -> _Prepared:
    known = _run(context).searched.get(query)
    searched, umbrellas = known if known is not None else robust_query(context.con, query)
    bm25_ids, dense_ids = (_ranked_ids(context, searched, dense) for dense in (False, True))
    # with a ranking's concept ids in hand, its (code, score) list is read only as deep as the table needs
    bm25 = context.retrieval.bm25(searched, FUSION_DEPTH if bm25_ids is not None else RETRIEVAL_DEPTH)
    dense = context.retrieval.dense_ranking(searched, AGREEMENT_DEPTH if dense_ids is not None else RETRIEVAL_DEPTH)
    table = candidate_table(
        context.hierarchy,
        query,
        bm25,
        dense,
        searched_as_of(query, searched),
        umbrellas,
        FITTED_DENSE_WEIGHT,
        bm25_ids=bm25_ids,
        dense_ids=dense_ids,
    )
    return _Prepared(searched, umbrellas, bm25, dense, table)


def _ranked_ids(context: MethodContext, query: str, dense: bool) -> RankedIds | None:
    """A ranking ``RETRIEVAL_DEPTH`` deep as concept ids, when its retriever answered in rows (one gather)."""
    rows = context.retrieval.rows(query, RETRIEVAL_DEPTH, dense=dense)
    return ranked_rows(context.hierarchy, *rows) if rows is not None else None


def build_for(context: MethodContext, builder: str, query: str, fitted: FittedBuilders) -> BuiltSet:
    """One builder's set for ``query`` from the run's shared rankings (the three builders share one table).

    A query the retrievers refuse (empty, SQL, too long, no English word) gets their reason, not
    "no retriever returned a code".
    """
    fitted = fitted.for_query(query)  # a cohort that nearly copies a bundled list: the builders fitted without it
    problem = query_problem(query)
    if problem is not None:
        return BuiltSet(method=builder, query=str(query)[:200], notes=[f"no results: {problem}"])
    typed_code = code_typed_as_query(context.hierarchy, query)
    if typed_code is not None:  # its digits would match unrelated codes as words: build from its name
        code, name = typed_code
        built = build_for(context, builder, name, fitted)
        note = f"the query is the code {code}: built from its name '{name}'"
        return built.model_copy(update={"query": query, "notes": [note, *built.notes]})
    if _CODE_LIKE.match(query.strip()):
        note = (
            f"no results: {query.strip()!r} looks like a code but is not an ICD-10-CM code of this vocabulary "
            "(an ICD-9 code?): type the condition's name, or look a code up with `python -m phenoforge lookup`"
        )
        return BuiltSet(method=builder, query=query, notes=[note])
    prepared = _prepare(context, query)
    if builder == LEARNED and prepared.learned is not None:
        return _with_ignored_words(query, prepared.learned)  # curated_transfer built it first as its fallback
    if builder == LEARNED:  # in its library's context when a library is scored, as the batched pass builds it
        library_context = library_context_of(context, [query], fitted)
        built = _learned_block(context, {query: prepared}, fitted, library_context)[query]
        prepared.learned = built  # shared, read-only: whoever changes a set copies it first
        return _with_ignored_words(query, built)
    done: dict[str, BuiltSet] = {}
    if LEARNED in builder_class(builder).requires:  # the learned set as the batched pass builds it, not anew
        done[LEARNED] = prepared.learned or build_for(context, LEARNED, query, fitted)
    return _with_ignored_words(query, _build(context, builder, query, prepared, fitted, built=done))


def _with_ignored_words(query: str, built: BuiltSet) -> BuiltSet:
    """``built`` naming the query's words the retrievers dropped (another script): it answers the rest alone."""
    ignored = [word for word in query.split() if _letters_but_none_english(word)]
    if not ignored:
        return built
    note = f"ignored {', '.join(repr(word) for word in ignored)} (no English letters: ICD-10-CM text is English)"
    return built.model_copy(update={"notes": [note, *built.notes]})


_CODE_LIKE = re.compile(r"^(?:[A-Za-z]\d\d\.?[0-9A-Za-z]{0,4}|\d{3}(?:\.\d{1,2})?|[Ee]\d{3}(?:\.\d)?)$")
"""An ICD-10-CM-shaped code (``Z99.999``), an ICD-9 code (``428.0``) or an ICD-9 E code (``E849.0``)."""


def _letters_but_none_english(word: str) -> bool:
    return any(ch.isalpha() for ch in word) and not any(ch.isascii() and ch.isalpha() for ch in word)


def code_typed_as_query(hierarchy: Hierarchy, query: str) -> tuple[str, str] | None:
    """(code, name) when the whole query is one ICD-10-CM code of the vocabulary (``I50.9``, `` i509 ``)."""
    typed = single_code_token(query)
    if typed is None:
        return None
    node = hierarchy.resolve(typed)
    return (hierarchy.code[node], hierarchy.name[node]) if node is not None and hierarchy.name.get(node) else None


BATCH_QUERIES = 32
"""Queries whose candidate tables are alive at once in a batched run: their membership features are
predicted in one model call (per-call cost amortised 32-fold), then the tables are dropped (each holds
four 5,000-entry rank and score tables: keeping a whole library's made the peak RSS)."""


def built_sets(context: MethodContext, builder: str, queries: Sequence[str], fitted: FittedBuilders) -> list[BuiltSet]:
    """``[build_for(context, builder, q, fitted) for q in queries]``, the same sets, computed in one pass.

    The pass builds the sets of every set builder of the run (``context.methods``) at once, query by
    query in blocks of ``BATCH_QUERIES``: each block's candidate tables are built once, serve every
    builder, and are dropped; the learned builder predicts a block's candidates in one model call.
    The other builders' sets wait in the run state until they ask for them (and are handed over once).
    """
    run = _run(context)
    waiting = run.built
    mine = waiting.get(builder, {})
    if any(query not in mine for query in queries):
        wanted = [name for name in builder_names() if name == builder or name in context.methods]
        wanted = [name for name in wanted if name not in waiting and name not in run.failed]
        by_fit: dict[int, tuple[FittedBuilders, list[str]]] = {}  # queries routed to other builders pass apart
        for query in dict.fromkeys(queries):
            answering = fitted.for_query(query)
            by_fit.setdefault(id(answering), (answering, []))[1].append(query)
        if len(by_fit) > 1:  # every query's corrected form ranked in one call, as a single pass ranks them
            every = list(dict.fromkeys([*queries, *context.queries]))
            unranked = [q for q in every if q not in run.prepared and not _handled_before_retrieval(context, q)]
            _prefetch_corrected(context, unranked)
        for answering, routed in by_fit.values():
            _build_pass(context, wanted, routed, answering)
        mine = waiting.get(builder, {})
    failure = run.failed.pop(builder, None)
    if failure is not None:  # a plug-in builder failed in the shared pass: its own method fails, nothing else
        raise failure
    out = [mine[query] for query in queries]
    waiting.pop(builder, None)  # handed over: the run's entries hold them now
    return out


def _build_pass(context: MethodContext, builders: list[str], queries: list[str], fitted: FittedBuilders) -> None:
    """Every builder of ``builders`` (and those they require) for every query, block by block."""
    run = _run(context)
    # the learned set is built for a block in one model call; other required sets are built on demand
    needs_learned = LEARNED in with_requirements(builders)
    sets: dict[str, dict[str, BuiltSet]] = {name: {} for name in builders}
    memo = run.prepared
    prepared_queries: list[str] = []
    # the run's every query when it is answered in chunks: the corrected forms are ranked in one call, as
    # when the whole run is one pass (the exact dense scan's rounding depends on which queries share a call)
    every = list(dict.fromkeys([*queries, *context.queries])) if context.queries else queries
    _prefetch_corrected(context, [q for q in every if q not in memo and not _handled_before_retrieval(context, q)])
    library_context = library_context_of(context, queries, fitted) if needs_learned else None
    for start in range(0, len(queries), BATCH_QUERIES):
        block = queries[start : start + BATCH_QUERIES]
        if context.progress is not None:
            context.progress(start, len(queries), f"set builders: {block[0]}")
        prepared: dict[str, _Prepared] = {}
        for query in block:
            if _handled_before_retrieval(context, query):
                for name in builders:  # the refusal or the typed code's name, with build_for's notes
                    sets[name][query] = build_for(context, name, query, fitted)
                continue
            prepared[query] = memo.get(query) or _prepared(context, query)
            prepared_queries.append(query)
        learned = _learned_block(context, prepared, fitted, library_context) if needs_learned else {}
        for query, ready in prepared.items():
            done: dict[str, BuiltSet] = {}
            if query in learned:
                ready.learned = done[LEARNED] = learned[query]
            for name in builders:
                if name in run.failed:
                    continue
                if name not in done:
                    try:
                        done[name] = _build(context, name, query, ready, fitted, built=done)
                    except Exception as error:  # a plug-in builder's bug is its own (a built-in's is raised)
                        if not is_plugin(builder_class(name)):
                            raise
                        run.failed[name] = error
                        continue
                sets[name][query] = done[name]
    for name in run.failed:
        sets.pop(name, None)
    for built in sets.values():  # as build_for answers: the words another script had are named
        for query in prepared_queries:
            if query in built:
                built[query] = _with_ignored_words(query, built[query])
    waiting = run.built
    for name, built in sets.items():  # beside the sets another pass of this call built (other builders' queries)
        waiting.setdefault(name, {}).update(built)


def _prefetch_corrected(context: MethodContext, queries: list[str]) -> None:
    """Rank the typo-corrected forms of ``queries`` in one batch (the harness prefetched the names as
    typed); each would otherwise be embedded and scanned on its own, ~25 ms apiece."""
    searched = _run(context).searched
    for query in queries:
        if query not in searched:
            searched[query] = robust_query(context.con, query)
    corrected = [searched[q][0] for q in queries if searched[q][0] != q]
    if corrected:
        context.retrieval.prefetch(corrected, dense=True, depth=RETRIEVAL_DEPTH)


def _handled_before_retrieval(context: MethodContext, query: str) -> bool:
    """A query ``build_for`` answers without its own retrieval: refused, a typed code, or code-like."""
    return (
        query_problem(query) is not None
        or code_typed_as_query(context.hierarchy, query) is not None
        or bool(_CODE_LIKE.match(query.strip()))
    )


def library_context_of(context: MethodContext, queries: Sequence[str], fitted: FittedBuilders) -> LibraryContext | None:
    """The names of the scored library's cohorts as each other's context (every name its manifest lists, else
    ``queries``), when a library is scored, a model fitted with the context columns is there, and at least
    two distinct names reach the retrievers. Made once per run (every fitted model of the run reads the same)."""
    if fitted.context_model is None or not context.library_id:
        return None
    listed = _library_names(context) or list(queries)
    names = tuple(q for q in dict.fromkeys(listed) if not _handled_before_retrieval(context, q))
    run = _run(context)
    memo = run.library_context
    if memo is not None and memo[1] == names:  # the names' signatures: the same for every model (routes too)
        return memo[2]
    made = _library_context(context, names) if len(names) >= 2 else None
    run.library_context = (fitted.context_model, names, made)
    return made


def _library_names(context: MethodContext) -> list[str]:
    """Every cohort name of the scored library's manifest ([] without a readable library directory)."""
    if not context.library_path:
        return []
    try:
        library = load_library(Path(context.library_path))
    except LibraryError:
        return []
    return [entry.cohort_name for entry in library.manifest.cohorts]


def _library_context(context: MethodContext, names: Sequence[str]) -> LibraryContext:
    memo = _run(context).prepared
    searched_memo = _run(context).searched
    missing = [q for q in names if q not in memo and q not in searched_memo]
    _prefetch_corrected(context, missing)
    # names the run does not score (a subset of the library) were not ranked with the run's: in one batch
    context.retrieval.prefetch([searched_memo[q][0] for q in missing], dense=True, depth=RETRIEVAL_DEPTH)
    signatures = []
    for query in names:
        if query in memo:
            signatures.append(signature_of(memo[query].table))
            continue
        searched = searched_memo[query][0]
        dense_ids = _ranked_ids(context, searched, True)
        dense = None if dense_ids is not None else context.retrieval.dense_ranking(searched, RETRIEVAL_DEPTH)
        signatures.append(name_signature(context.hierarchy, query, searched_as_of(query, searched), dense, dense_ids))
    return LibraryContext(context.hierarchy, signatures)


def _learned_block(
    context: MethodContext,
    prepared: dict[str, _Prepared],
    fitted: FittedBuilders,
    library_context: LibraryContext | None = None,
) -> dict[str, BuiltSet]:
    """The learned sets of a block of queries, the model predicting every candidate of the block at once
    (the context model, with the context columns, for the queries ``library_context`` applies to)."""
    done = {query: ready.learned for query, ready in prepared.items() if ready.learned is not None}
    todo = [query for query in prepared if query not in done]
    if fitted.model is None:  # the adaptive cut-off answers (build_set says so)
        return {**done, **{query: _build(context, LEARNED, query, prepared[query], fitted) for query in todo}}
    by_model: dict[int, tuple[FittedBuilders, dict[str, np.ndarray]]] = {}
    for query in todo:
        if len(prepared[query].table):
            builders, matrix = learned_inputs(context.hierarchy, prepared[query].table, fitted, library_context)
            by_model.setdefault(id(builders.model), (builders, {}))[1][query] = matrix
    predicted: dict[str, np.ndarray] = {}
    chosen: dict[str, FittedBuilders] = {}
    for builders, features in by_model.values():
        assert builders.model is not None
        builders.model.check_may_score(context.library_id or None, scored_group(context))
        predicted.update(zip(features, predict_many(builders.model, list(features.values())), strict=True))
        chosen.update(dict.fromkeys(features, builders))
    for query in todo:
        builders = chosen.get(query, fitted)
        done[query] = _build(context, LEARNED, query, prepared[query], builders, predicted.get(query))
    return done


def learned_inputs(
    hierarchy: Hierarchy, table: CandidateTable, fitted: FittedBuilders, library_context: LibraryContext | None
) -> tuple[FittedBuilders, np.ndarray]:
    """The builders whose membership model answers ``table`` (the context model where ``library_context``
    applies to its query) and the feature matrix that model reads."""
    matrix = learned_features(hierarchy, table, fitted.knowledge)
    if library_context is not None and fitted.context_model is not None and library_context.applies_to(table.query):
        return fitted.in_context(), np.hstack([matrix, library_context.features(table)])
    return fitted, matrix


def _build(
    context: MethodContext,
    builder: str,
    query: str,
    prepared: _Prepared,
    fitted: FittedBuilders,
    probabilities: np.ndarray | None = None,
    built: dict[str, BuiltSet] | None = None,
) -> BuiltSet:
    """What ``build_for`` builds from a prepared query (``built``: the sets of the builders it requires,
    when built already; the learned set defaults to ``prepared.learned``)."""
    done = dict(built or {})
    if prepared.learned is not None:
        done.setdefault(LEARNED, prepared.learned)
    return build_set(
        context.hierarchy,
        fitted,
        builder,
        prepared.table,
        scored_library_id=context.library_id or None,
        scored_group=scored_group(context),
        built=done,
        probabilities=probabilities,
    )


def searched_as_of(query: str, searched: str) -> str | None:
    return searched if searched != query else None

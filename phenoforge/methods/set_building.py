"""What the three set-building methods share: fitting once per held-out group, and one predict.

A set builder answers with the list a researcher would run against claims (billable codes, each
with the hit or roll-up that put it there) instead of a top-k ranking. Its fitted pieces (cut-off,
subtree parameters, membership model) are trained on bundled libraries *outside the scored
library's group* and cached per group for the process, so a benchmark over several libraries fits
once per group and never scores a cohort with a model that saw it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import numpy as np

from phenoforge.caches import ProcessCache
from phenoforge.config import ProgressCallback
from phenoforge.engine.codes import single_code_token
from phenoforge.engine.curated import Library, list_libraries, load_library
from phenoforge.engine.expansion import Hierarchy
from phenoforge.engine.query import query_problem
from phenoforge.errors import LibraryError
from phenoforge.eval.runs import RunEntry
from phenoforge.methods.base import CohortTask, Method, MethodContext, MethodSetup, SkipMethod
from phenoforge.setbuild.api import (
    FittedBuilders,
    StoredFitFiles,
    build_set,
    candidate_table,
    fit_builders,
    groups_of,
    held_out_groups,
    is_user_import,
    knowledge_identity,
    library_stamp,
    robust_query,
    stored_fit_files,
    training_libraries,
)
from phenoforge.setbuild.builders import (
    StateError,
    builder_class,
    builder_classes,
    builder_identities,
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
from phenoforge.setbuild.groups import library_group
from phenoforge.setbuild.learned import LeakageError, MembershipModel, learned_features, predict_many
from phenoforge.setbuild.models import BuiltCode, BuiltSet, CodeProvenance
from phenoforge.setbuild.transfer import (
    COPY_JACCARD,
    KnowledgeFileError,
    KnowledgeLeakError,
    copied_groups,
    embed_identity_of,
    knowledge_path,
    load_knowledge,
)
from phenoforge.trusted import trusted

LEARNED = "learned"
FITTED_DENSE_WEIGHT = 0.5
"""The fusion weight the builders are fitted and run at (their features read the fused ranking)."""

_FITTED: ProcessCache[tuple[object, ...], FittedBuilders] = ProcessCache("fitted set builders")
_LOCK = threading.Lock()


def scored_group(context: MethodContext) -> str | None:
    """The scored library's group under the builders' group rule.

    The harness passes the manifest's declared group, else the library id; a library that declares
    none (a Quan Elixhauser, an older data directory) still belongs with its near-duplicates, which
    ``library_group``'s fallback knows and the library id alone does not.
    """
    return scoring_fit_groups(context.library_id, context.library_group)[0]


def scoring_fit_groups(library_id: str, group: str) -> tuple[str | None, list[str]]:
    """The group a library scored by the harness is held out with (``group``: what the harness passes, its
    manifest's declared group else its id), and the further group its builders leave out: a library declaring
    a group other than its id's family (cms-hcc-v28-old as "old") is held out with both."""
    declared = group if group != library_id else None
    if not library_id and not declared:
        held_out = None
    else:
        held_out = library_group({"library_id": library_id, "group": declared}) or None
    family = library_group({"library_id": library_id}) if library_id else ""
    extra = [family] if family not in ("", held_out, library_id.lower()) else []
    return held_out, extra


def fitted_for(context: MethodContext) -> FittedBuilders:
    """The builders fitted without the scored library's group (fitted on first use, then cached).

    The three builders of one run share the answer (the cache key reads every library's files).
    """
    run = _run(context)
    if run.fitted is not None:
        return run.fitted
    held_out, extra = scoring_fit_groups(context.library_id, context.library_group)
    broken: list[str] = []  # a broken installed library is left out of training and named in the notes
    libraries = list_libraries(errors=broken)
    key = (
        context.hierarchy.build_id,
        held_out,
        context.library_id,
        context.has_dense,
        builder_identities(),  # a builder registered since (or again, as another class) needs its own fit
        tuple(sorted((lib.library_id, str(lib.path), library_stamp(lib)) for lib in libraries)),
        _scored_stamp(context),  # the copy check reads the scored library's lists
    )
    with _LOCK:
        fitted = _FITTED.get(key)
        if fitted is None:
            progress = context.progress
            fitted = fit_builders(context.con, context.dense, held_out, libraries, progress, also_held_out=extra)
            copied = sorted(_copied_groups(context, fitted) & set(fitted.training_groups))
            if copied:  # a copy of a bundled library: its model and parameters were fitted on these cohorts
                extra += copied
                fitted = fit_builders(context.con, context.dense, held_out, libraries, progress, also_held_out=extra)
                fitted.notes.append(
                    f"fitted and curated knowledge without group(s) {', '.join(copied)}: "
                    f"{context.library_id or 'the scored library'} lists cohorts with exactly their codes, "
                    f"or nearly (Jaccard >= {COPY_JACCARD})"
                )
            fitted.notes += [f"not used for fitting: {problem}" for problem in broken]
            fitted = _FITTED.remember(key, without_copied_lists(context, fitted))
        run.fitted = fitted  # the fit in hand: a clear of the caches meanwhile does not lose it
        return fitted


def _scored_stamp(context: MethodContext) -> tuple[str, str]:
    if not context.library_path:
        return "", ""
    try:
        return context.library_path, library_stamp(load_library(Path(context.library_path)))
    except LibraryError:
        return context.library_path, "unreadable"


def _copied_groups(context: MethodContext, fitted: FittedBuilders) -> set[str]:
    """Groups listing a cohort with exactly (or nearly) the codes of one of the scored library's, not yet hidden.

    Only for a scored library outside the knowledge (a user's import, a directory not installed): it
    declares its own group, so a copy of a bundled library under another id would be scored with the
    lists it copies. A bundled library's identical lists in another group stay (that is the transfer).
    """
    if fitted.knowledge is None or not context.library_path:
        return set()
    try:
        library = load_library(Path(context.library_path))
    except LibraryError:
        return set()
    view = fitted.knowledge
    known = {cohort.library_id for cohort in view.knowledge.cohorts}
    if library.library_id in known and not is_user_import(library):
        return set()
    return copied_groups(context.con, context.hierarchy, view.knowledge, library) - view.excluded


def without_copied_lists(context: MethodContext, fitted: FittedBuilders) -> FittedBuilders:
    """``fitted`` whose curated knowledge also hides every group listing a cohort the scored library copies
    (exactly or nearly: :data:`~phenoforge.setbuild.transfer.COPY_JACCARD`)."""
    copied = _copied_groups(context, fitted)
    if not copied or fitted.knowledge is None:
        return fitted
    view = fitted.knowledge
    library_id = context.library_id or "the scored library"
    note = (
        f"curated knowledge without group(s) {', '.join(sorted(copied))}: "
        f"{library_id} lists cohorts with exactly their codes, or nearly (Jaccard >= {COPY_JACCARD})"
    )
    return replace(fitted, knowledge=view.knowledge.view(view.excluded | copied), notes=[*fitted.notes, note])


def clear_fitted() -> None:
    """Forget the fitted builders (after libraries or models change on disk)."""
    with _LOCK:
        _FITTED.clear()


def describe(provenance: CodeProvenance) -> str:
    """One line saying why a code is in the list: the hit or node it came from and the rule."""
    via = f"{provenance.source} via {provenance.via_code}"
    if provenance.via_rank is not None:
        via += f" (fused rank {provenance.via_rank})"
    return f"{via}; score {provenance.score:.3f}; {provenance.rule}"


def to_entries(built: BuiltSet) -> list[RunEntry]:
    # fields of validated models, already of their declared types: constructed without validating
    # again (tens of thousands of codes per benchmark)
    return [
        trusted(
            RunEntry, code=item.code, rank=rank, score=item.provenance.score, provenance=[describe(item.provenance)]
        )
        for rank, item in enumerate(built.codes, start=1)
    ]


def _shared_entries(context: MethodContext, built: BuiltSet) -> list[RunEntry]:
    """``to_entries(built)``; a set holding the very code list of one converted before in this run
    (curated_transfer's fallback is the learned set, its codes shared) gets those entries again."""
    memo = _run(context).entries
    known = memo.pop(id(built.codes), None)
    if known is not None and known[0] is built.codes:
        return list(known[1])
    entries = to_entries(built)
    if built.method == LEARNED and built.codes:  # the one set another builder hands over as it is
        memo[id(built.codes)] = (built.codes, entries)
    return entries


@dataclass
class _Prepared:
    searched: str
    umbrellas: dict[str, str]
    bm25: list[tuple[str, float]]
    dense: list[tuple[str, float]] | None
    table: CandidateTable
    learned: BuiltSet | None = None
    """the learned set, built once per query for both ``learned`` and curated_transfer's fallback
    (its features are the costly part); whichever of the two runs first builds it"""


@dataclass
class SetBuildingRun:
    """What the set builders of one run share (``context.shared.get(SetBuildingRun)``)."""

    fitted: FittedBuilders | None = None
    """the builders fitted for the scored library, shared by every builder of the run"""
    prepared: dict[str, _Prepared] = field(default_factory=dict)
    """per query, its candidate table (kept only while a block is built, or for a query built on its own)"""
    searched: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    """per query, its typo-corrected form and umbrella nodes"""
    built: dict[str, dict[str, BuiltSet]] = field(default_factory=dict)
    """per builder, the sets the batched pass built that the builder has not asked for yet"""
    entries: dict[int, tuple[list[BuiltCode], list[RunEntry]]] = field(default_factory=dict)
    """the learned sets' run entries, by code list, for curated_transfer handing the same list over"""
    library_context: tuple[MembershipModel | None, tuple[str, ...], LibraryContext | None] | None = None
    """the context model, the names and the library context made for them (made once per run)"""
    failed: dict[str, Exception] = field(default_factory=dict)
    """plug-in builders whose build failed in the shared pass, with the error their own method raises"""


def _run(context: MethodContext) -> SetBuildingRun:
    return context.shared.get(SetBuildingRun)


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
        _build_pass(context, wanted, list(dict.fromkeys(queries)), fitted)
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
    _prefetch_corrected(context, [q for q in queries if q not in memo and not _handled_before_retrieval(context, q)])
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
    waiting.update(sets)


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
    two distinct names reach the retrievers. Made once per run and fitted model."""
    if fitted.context_model is None or not context.library_id:
        return None
    listed = _library_names(context) or list(queries)
    names = tuple(q for q in dict.fromkeys(listed) if not _handled_before_retrieval(context, q))
    run = _run(context)
    memo = run.library_context
    if memo is not None and memo[0] is fitted.context_model and memo[1] == names:
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


def make_setup(builder: str) -> Callable[[MethodContext], MethodSetup]:
    def setup(context: MethodContext) -> MethodSetup:
        try:
            fitted = fitted_for(context)
            fitted.check_may_score(context.library_id or None, scored_group(context))
            degraded = fitted.builder(builder).degraded()
        except (LeakageError, KnowledgeLeakError, StateError) as error:
            raise SkipMethod(str(error)) from None
        if not fitted.training_libraries:
            degraded = "; ".join(filter(None, [degraded, "no bundled library to fit on: untuned defaults"]))
        notes = list(fitted.notes)
        if context.dense_weight != FITTED_DENSE_WEIGHT:
            notes.append(
                f"fuses at dense weight {FITTED_DENSE_WEIGHT} (what it was fitted at), "
                f"not this run's {context.dense_weight}"
            )
        return MethodSetup(trained_on=list(fitted.training_libraries), degraded=degraded, notes=notes, state=fitted)

    return setup


def make_predict(builder: str) -> Callable[[MethodContext, CohortTask], list[RunEntry]]:
    def predict(context: MethodContext, task: CohortTask) -> list[RunEntry]:
        fitted = context.setups.get(builder)
        if not isinstance(fitted, FittedBuilders):
            fitted = fitted_for(context)
        built = build_for(context, builder, task.query, fitted)
        for note in [*built.notes, *([built.fallback] if built.fallback else [])]:
            context.note(builder, task.cohort_id, note)
        return to_entries(built)

    return predict


def make_predict_batch(builder: str) -> Callable[[MethodContext, Sequence[CohortTask]], list[list[RunEntry]]]:
    def predict_batch(context: MethodContext, tasks: Sequence[CohortTask]) -> list[list[RunEntry]]:
        fitted = context.setups.get(builder)
        if not isinstance(fitted, FittedBuilders):
            fitted = fitted_for(context)
        out = []
        sets = built_sets(context, builder, [task.query for task in tasks], fitted)
        for task, built in zip(tasks, sets, strict=True):
            for note in [*built.notes, *([built.fallback] if built.fallback else [])]:
                context.note(builder, task.cohort_id, note)
            out.append(_shared_entries(context, built))
        return out

    return predict_batch


def set_builder(name: str, label: str, description: str, source: str = "") -> Method:
    """The registry entry of one set builder (``source``: where a plug-in builder comes from; empty for
    phenoforge's own, which the method registry marks built-in)."""
    return Method(
        name=name,
        source=source,
        predict=make_predict(name),
        label=label,
        description=description,
        uses=frozenset({"dense"}),
        setup=make_setup(name),
        depth=RETRIEVAL_DEPTH,
        predict_batch=make_predict_batch(name),
    )


def set_builder_methods() -> list[Method]:
    """A method for every registered set builder (:mod:`phenoforge.setbuild.builders`)."""
    return [
        set_builder(
            name,
            cls.label,
            cls.description,
            f"set builder {cls.__module__}.{cls.__qualname__}" if is_plugin(cls) else "",
        )
        for name, cls in builder_classes().items()
    ]


def build_for_free_query(
    con: duckdb.DuckDBPyConnection,
    builder: str,
    query: str,
    dense: object | None = None,
    progress: ProgressCallback | None = None,
) -> BuiltSet:
    """A set for a researcher's own query (no library is scored, so every bundled library trains it)."""
    from phenoforge.engine.expansion import get_hierarchy
    from phenoforge.methods.retrieval import Retrieval

    builder_class(builder)  # an unknown name is refused with the choices
    context = MethodContext(
        con=con,
        hierarchy=get_hierarchy(con),
        retrieval=Retrieval(con, dense, RETRIEVAL_DEPTH),
        progress=progress,
    )
    fitted = fitted_for(context)
    built = build_for(context, builder, query, fitted)
    # a fit that could not be stored is redone on every search: say so where the search prints its notes
    unkept = [note for note in fitted.notes if " not stored (" in note]
    return built.model_copy(update={"trained_on": list(fitted.training_libraries), "notes": [*built.notes, *unkept]})


def fit_for_installed_libraries(
    con: duckdb.DuckDBPyConnection, dense: object | None = None, progress: ProgressCallback | None = None
) -> list[tuple[str, FittedBuilders]]:
    """Fit (or reuse) the builders for every installed library's group, and for free queries.

    ``build`` calls this so the first benchmark and the first search find every model on disk;
    each entry is (what it scores, the fitted builders).
    """
    libraries = list_libraries(errors=[])
    out = []
    for group in [*dict.fromkeys(library_group(lib.manifest) for lib in libraries), None]:
        fitted = fit_builders(con, dense, group, libraries, progress)
        out.append((f"libraries of group {group}" if group else "free queries and imported libraries", fitted))
    return out


def installed_fit_keys(libraries: Sequence[Library]) -> list[tuple[str | None, tuple[str, ...]]]:
    """The (held-out group, further held-out groups) of every fit ``build`` makes (each installed library's
    group, and none for free queries) and of every fit a benchmark of an installed library makes."""
    keys: list[tuple[str | None, tuple[str, ...]]] = [
        (group, ()) for group in dict.fromkeys(library_group(lib.manifest) for lib in libraries)
    ]
    keys.append((None, ()))
    for lib in libraries:
        held_out, extra = scoring_fit_groups(lib.library_id, _harness_group(lib))
        keys.append((held_out, tuple(extra)))
    return list(dict.fromkeys(keys))


def _harness_group(library: Library) -> str:
    """The group the harness passes for a library (``Qrels.group``): its declared one, else its id."""
    return str(getattr(library.manifest, "group", None) or library.library_id)


def current_fit_files(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    dense: object | None,
    libraries: Sequence[Library],
    *,
    embedding_known: bool = True,
) -> tuple[list[StoredFitFiles], list[str]]:
    """The files every fit of the installed libraries reads (``installed_fit_keys``, and a benchmark's refit of
    a user's import that copies a bundled library's lists), found without fitting; and what cannot be told.

    The copy check reads the stored curated knowledge; without it, which fits a benchmark of an import
    reads is not known (said in the second list). ``embedding_known=False``: the dense index's embedding is
    not asked for its identity (loading it would export the sentence model first), so that knowledge is not read.
    """
    keys = installed_fit_keys(libraries)
    found = [stored_fit_files(hierarchy, dense, libraries, held, extra) for held, extra in keys]
    unknown: list[str] = []
    imports = [lib for lib in libraries if is_user_import(lib)]
    if not imports:
        return found, unknown
    stamps, _groups = knowledge_identity(libraries)
    try:
        if dense is not None and not embedding_known:
            raise KnowledgeFileError("the sentence model's ONNX export is missing, so its identity is not known")
        identity = embed_identity_of(dense) if dense is not None else "no embedding"
        if identity is None:
            raise KnowledgeFileError("the dense index's embedding declares no identity")
        knowledge = load_knowledge(knowledge_path(hierarchy.build_id, stamps, identity), hierarchy, stamps, identity)
    except KnowledgeFileError as error:
        names = ", ".join(lib.library_id for lib in imports)
        return found, [f"which fits a benchmark of {names} reads is not known (curated knowledge not stored: {error})"]
    for lib in imports:
        held_out, extra = scoring_fit_groups(lib.library_id, _harness_group(lib))
        held = held_out_groups(held_out, extra)
        trained_groups = {g for train in training_libraries(libraries, held) for g in groups_of(train)}
        copied = sorted((copied_groups(con, hierarchy, knowledge, lib) - set(held)) & trained_groups)
        if copied:  # as ``fitted_for``: fitted again without the groups whose lists it copies
            found.append(stored_fit_files(hierarchy, dense, libraries, held_out, [*extra, *copied]))
    return found, unknown

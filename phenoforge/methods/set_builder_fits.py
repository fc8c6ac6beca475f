"""Which fitted set builders score a library: held out with its group, cached per process, copies detected.

A scored library is held out with its declared group and its id's family; a user's import that copies a
bundled library's lists (exactly or nearly) is held out with the copied group too."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import duckdb

from phenoforge.caches import ProcessCache
from phenoforge.config import ProgressCallback
from phenoforge.engine.curated import Library, list_libraries, load_library
from phenoforge.engine.expansion import Hierarchy
from phenoforge.errors import LibraryError
from phenoforge.eval.models import CopyHoldout
from phenoforge.methods.base import MethodContext
from phenoforge.methods.set_builder_run import _run
from phenoforge.setbuild.api import (
    FittedBuilders,
    StoredFitFiles,
    fit_builders,
    groups_of,
    held_out_groups,
    is_user_import,
    knowledge_identity,
    library_stamp,
    stored_fit_files,
    training_libraries,
)
from phenoforge.setbuild.builders import (
    builder_identities,
)
from phenoforge.setbuild.groups import library_group
from phenoforge.setbuild.transfer import (
    COPY_JACCARD,
    KnowledgeFileError,
    copy_holdout,
    embed_identity_of,
    knowledge_path,
    load_knowledge,
)

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
            holdout = copy_holdout_for(context, fitted, libraries)
            whole = sorted(set(holdout.groups) & set(fitted.training_groups)) if holdout is not None else []
            if whole:  # systemic copying: the model and parameters were fitted on these groups' cohorts
                extra += whole
                fitted = fit_builders(context.con, context.dense, held_out, libraries, progress, also_held_out=extra)
            fitted.notes += [f"not used for fitting: {problem}" for problem in broken]
            routes: dict[str, FittedBuilders] = {}
            if holdout is not None:  # each copying cohort: the builders fitted without the groups it copies
                wanted = copy_routes(holdout, libraries, fitted.training_groups)
                fits: dict[tuple[str, ...], FittedBuilders] = {}
                for combo in sorted(set(wanted.values())):
                    routed = fit_builders(
                        context.con, context.dense, held_out, libraries, progress, also_held_out=[*extra, *combo]
                    )
                    fits[combo] = without_copied_lists(context, routed, holdout)
                routes = {query: fits[combo] for query, combo in wanted.items()}
                holdout = _with_routes(holdout, wanted)
            fitted = without_copied_lists(context, fitted, holdout)
            if routes and holdout is not None:
                fitted = replace(fitted, routes=routes, notes=[*fitted.notes, _routes_note(routes, holdout)])
            fitted = _FITTED.remember(key, fitted)
        run.fitted = fitted  # the fit in hand: a clear of the caches meanwhile does not lose it
        return fitted


def _scored_stamp(context: MethodContext) -> tuple[str, str]:
    if not context.library_path:
        return "", ""
    try:
        return context.library_path, library_stamp(load_library(Path(context.library_path)))
    except LibraryError:
        return context.library_path, "unreadable"


def copy_holdout_for(
    context: MethodContext, fitted: FittedBuilders, libraries: Sequence[Library] = ()
) -> CopyHoldout | None:
    """What the near-copy guard holds out for the scored library (:func:`~phenoforge.setbuild.transfer.copy_holdout`):
    the knowledge's cohorts that are near copies of its lists, and the groups copying from which is systemic.

    Only for a scored library outside the knowledge (a user's import, a directory not installed): it
    declares its own group, so a copy of a bundled library under another id would be scored with the
    lists it copies. A bundled library's identical lists in another group stay (that is the transfer).
    None: not such a library.
    """
    if fitted.knowledge is None or not context.library_path:
        return None
    try:
        library = load_library(Path(context.library_path))
    except LibraryError:
        return None
    view = fitted.knowledge
    known = {cohort.library_id for cohort in view.knowledge.cohorts}
    if library.library_id in known and not is_user_import(library):
        return None
    return copy_holdout(context.con, context.hierarchy, view.knowledge, library, view.excluded, libraries)


def without_copied_lists(
    context: MethodContext, fitted: FittedBuilders, holdout: CopyHoldout | None = None
) -> FittedBuilders:
    """``fitted`` whose curated knowledge also hides every cohort that is a near copy of one the scored library
    lists (Jaccard >= :data:`~phenoforge.setbuild.transfer.COPY_JACCARD`), and whole every group copying from
    which is systemic; ``holdout``: the guard's answer when the caller has it (computed otherwise)."""
    holdout = holdout if holdout is not None else copy_holdout_for(context, fitted, list_libraries(errors=[]))
    if holdout is None or fitted.knowledge is None:
        return fitted
    library_id = context.library_id or "the scored library"
    notes = [f"near-copy guard: {holdout.summary()}"]
    if holdout.groups:
        notes.append(
            f"fitted and curated knowledge without group(s) {', '.join(sorted(holdout.groups))}: "
            f"{library_id} lists cohorts with exactly their codes, or nearly (Jaccard >= {COPY_JACCARD}), "
            f"systemically ({'; '.join(f'{g}: {why}' for g, why in sorted(holdout.groups.items()))})"
        )
    cohorts = [pair for pair in holdout.pairs if pair.library_id not in _libraries_of(fitted, holdout.groups)]
    if cohorts:
        shown = ", ".join(
            f"{p.scored_cohort} ~ {p.library_id}/{p.cohort_id} ({p.jaccard:.2f})" for p in cohorts[:PAIRS_SHOWN]
        )
        more = f" and {len(cohorts) - PAIRS_SHOWN} more" if len(cohorts) > PAIRS_SHOWN else ""
        notes.append(
            f"curated knowledge without {len({(p.library_id, p.cohort_id) for p in cohorts})} cohort(s) "
            f"{library_id} lists nearly the codes of (Jaccard >= {COPY_JACCARD}), and each of its cohorts that "
            f"does without the group it copies: {shown}{more}"
        )
    per_query: dict[str, set[str]] = {}  # a scored cohort that nearly copies a group's list sees none of the group
    for pair in holdout.pairs:
        per_query.setdefault(pair.scored_name, set()).update(pair.groups)
    view = fitted.knowledge.without(holdout.groups, holdout.held_out_cohorts, per_query)
    return replace(fitted, knowledge=view, notes=[*fitted.notes, *notes], held_out=holdout)


def copy_routes(
    holdout: CopyHoldout, libraries: Sequence[Library], training_groups: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """Scored cohort name -> the groups (as the installed libraries declare them) the builders answering it
    must be fitted without: those of the bundled cohorts it nearly copies that the fit still trains on."""
    named = {lib.library_id: library_group(lib.manifest) for lib in libraries}
    trained = set(training_groups)
    wanted: dict[str, set[str]] = {}
    for pair in holdout.pairs:
        groups = {named[pair.library_id]} if pair.library_id in named else set(pair.groups)
        wanted.setdefault(pair.scored_name, set()).update(groups & trained)
    return {query: tuple(sorted(groups)) for query, groups in wanted.items() if groups}


def _with_routes(holdout: CopyHoldout, wanted: dict[str, tuple[str, ...]]) -> CopyHoldout:
    fitted_without = {
        pair.scored_cohort: list(wanted[pair.scored_name]) for pair in holdout.pairs if pair.scored_name in wanted
    }
    return holdout.model_copy(update={"fitted_without": fitted_without})


def _routes_note(routes: dict[str, FittedBuilders], holdout: CopyHoldout) -> str:
    combos: dict[str, int] = {}
    for groups in holdout.fitted_without.values():
        combos[", ".join(groups)] = combos.get(", ".join(groups), 0) + 1
    said = "; ".join(f"without {combo}: {n}" for combo, n in sorted(combos.items()))
    return (
        f"{len(holdout.fitted_without)} scored cohort(s) that nearly copy a bundled list are answered by builders "
        f"fitted without the copied group(s), as that group's own cohorts are ({said})"
    )


PAIRS_SHOWN = 10
"""Held-out pairs a note names (the report's ``held_out`` lists every one)."""


def _libraries_of(fitted: FittedBuilders, groups: Iterable[str]) -> set[str]:
    """The knowledge's libraries in one of ``groups``."""
    wanted = set(groups)
    if fitted.knowledge is None or not wanted:
        return set()
    return {c.library_id for c in fitted.knowledge.knowledge.cohorts if c.groups & wanted}


def clear_fitted() -> None:
    """Forget the fitted builders (after libraries or models change on disk)."""
    with _LOCK:
        _FITTED.clear()


def fit_for_installed_libraries(
    con: duckdb.DuckDBPyConnection, dense: object | None = None, progress: ProgressCallback | None = None
) -> list[tuple[str, FittedBuilders]]:
    """Fit (or reuse) the builders for every installed library's group, and for free queries.

    ``build`` calls this so the first benchmark and the first search find every model on disk;
    each entry is (what it scores, the fitted builders). The fit on every library comes first: it is the
    one a researcher's own description is built with; the held-out fits only score the bundled libraries.
    """
    libraries = list_libraries(errors=[])
    out = []
    for group in [None, *dict.fromkeys(library_group(lib.manifest) for lib in libraries)]:
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
        holdout = copy_holdout(con, hierarchy, knowledge, lib, held, libraries)
        copied = sorted(set(holdout.groups) & trained_groups)
        if copied:  # as ``fitted_for``: fitted again without the groups whose lists it copies
            extra = [*extra, *copied]
            found.append(stored_fit_files(hierarchy, dense, libraries, held_out, extra))
            trained_groups = {
                g for train in training_libraries(libraries, held_out_groups(held_out, extra)) for g in groups_of(train)
            }
        for combo in sorted(set(copy_routes(holdout, libraries, sorted(trained_groups)).values())):
            found.append(stored_fit_files(hierarchy, dense, libraries, held_out, [*extra, *combo]))
    return found, unknown

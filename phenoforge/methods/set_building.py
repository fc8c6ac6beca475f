"""What the three set-building methods share: fitting once per held-out group, and one predict.

A set builder answers with the list a researcher would run against claims (billable codes, each
with the hit or roll-up that put it there) instead of a top-k ranking. Its fitted pieces (cut-off,
subtree parameters, membership model) are trained on bundled libraries *outside the scored
library's group* and cached per group for the process, so a benchmark over several libraries fits
once per group and never scores a cohort with a model that saw it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import duckdb

from phenoforge.config import ProgressCallback
from phenoforge.eval.runs import RunEntry
from phenoforge.methods.base import CohortTask, Method, MethodContext, MethodSetup, SkipMethod
from phenoforge.methods.set_builder_fits import (  # re-exported: the set-building methods' one module to read
    clear_fitted,
    current_fit_files,
    fit_for_installed_libraries,
    fitted_for,
    installed_fit_keys,
    scored_group,
    scoring_fit_groups,
    without_copied_lists,
)
from phenoforge.methods.set_builder_pass import (  # re-exported
    BATCH_QUERIES,
    FITTED_DENSE_WEIGHT,
    LEARNED,
    build_for,
    built_sets,
    code_typed_as_query,
    learned_inputs,
    library_context_of,
    searched_as_of,
)
from phenoforge.methods.set_builder_run import SetBuildingRun, _run
from phenoforge.setbuild.api import (
    FitRefused,
    FittedBuilders,
)
from phenoforge.setbuild.builders import (
    StateError,
    builder_class,
    builder_classes,
    is_plugin,
)
from phenoforge.setbuild.candidates import (
    RETRIEVAL_DEPTH,
)
from phenoforge.setbuild.learned import LeakageError
from phenoforge.setbuild.models import BuiltSet, CodeProvenance
from phenoforge.setbuild.transfer import (
    KnowledgeLeakError,
)
from phenoforge.trusted import trusted

__all__ = [
    "BATCH_QUERIES",
    "FITTED_DENSE_WEIGHT",
    "LEARNED",
    "SetBuildingRun",
    "build_for",
    "build_for_free_query",
    "built_sets",
    "clear_fitted",
    "code_typed_as_query",
    "current_fit_files",
    "describe",
    "fit_for_installed_libraries",
    "fitted_for",
    "installed_fit_keys",
    "learned_inputs",
    "library_context_of",
    "make_predict",
    "make_predict_batch",
    "make_setup",
    "scored_group",
    "scoring_fit_groups",
    "searched_as_of",
    "set_builder",
    "set_builder_methods",
    "to_entries",
    "without_copied_lists",
]


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


def make_setup(builder: str) -> Callable[[MethodContext], MethodSetup]:
    def setup(context: MethodContext) -> MethodSetup:
        try:
            fitted = fitted_for(context)
            fitted.check_may_score(context.library_id or None, scored_group(context))
            degraded = fitted.builder(builder).degraded()
        except (LeakageError, KnowledgeLeakError, StateError, FitRefused) as error:
            raise SkipMethod(str(error)) from None
        if not fitted.training_libraries:
            degraded = "; ".join(filter(None, [degraded, "no bundled library to fit on: untuned defaults"]))
        notes = list(fitted.notes)
        if context.dense_weight != FITTED_DENSE_WEIGHT:
            notes.append(
                f"fuses at dense weight {FITTED_DENSE_WEIGHT} (what it was fitted at), "
                f"not this run's {context.dense_weight}"
            )
        return MethodSetup(
            trained_on=list(fitted.training_libraries),
            degraded=degraded,
            notes=notes,
            state=fitted,
            held_out=fitted.held_out,
            fits=fitted.origin,
        )

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

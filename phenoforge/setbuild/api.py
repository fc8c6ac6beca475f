"""Fitting the set builders once per held-out group, keeping what they fitted, and building a set.

``fit_builders`` fits (or reuses) every registered builder (:mod:`phenoforge.setbuild.builders`) on the
installed *bundled* libraries (development and test alike) outside ``held_out_group``, in the order the
registry gives (a builder after those it requires), and stores each builder's fitted state under
``data/models/`` keyed by vocabulary build and training cohorts. ``build_set`` then answers one query's
candidate table with one builder, refusing to score a library whose group the fitted builders saw.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self

import duckdb
import numpy as np
from pydantic import BaseModel, ValidationError

from phenoforge.caches import ProcessCache
from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.curated import Library, list_libraries
from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.errors import PhenoforgeError
from phenoforge.eval.models import CopyHoldout
from phenoforge.locks import lock_if_writable
from phenoforge.memory import collections_paused
from phenoforge.setbuild.builders import (
    BuildInputs,
    SetBuilder,
    StateError,
    Training,
    builder_class,
    builder_classes,
    is_plugin,
)
from phenoforge.setbuild.builders.learned import Learned
from phenoforge.setbuild.candidates import CandidateTable, RankedIds, Retrieval, build_candidates
from phenoforge.setbuild.corpus import Example, library_examples
from phenoforge.setbuild.groups import is_training_library, library_group
from phenoforge.setbuild.learned import ALL_FEATURE_NAMES, LeakageError, MembershipModel
from phenoforge.setbuild.learned import FORMAT_VERSION as LEARNED_FORMAT_VERSION
from phenoforge.setbuild.learned import RECIPE as LEARNED_RECIPE
from phenoforge.setbuild.model_store import models_dir, not_stored
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.robust import get_typo_corrector, umbrella_nodes
from phenoforge.setbuild.transfer import (
    CuratedKnowledge,
    KnowledgeView,
    curated_knowledge,
    embed_fn_of,
    embed_identity_of,
    knowledge_digest,
)
from phenoforge.storage import write_atomically

log = logging.getLogger(__name__)

FIT_FORMAT_VERSION = 3
"""Bumped when what ``fit_builders`` stores changes shape: older fitted bundles are refitted.
3: one fitted state per registered builder, by name."""
PARAMS_RECIPE = "3"
"""Bumped when the tuned parameters' file changes (3: one state per examples-only builder, by name) or the
rule builders' scales change: stored tuned parameters of an older recipe are retuned, not reused."""


class _Digested(BaseModel):
    """A stored file that carries the SHA-256 of its other fields as written: an edited one is not trusted."""

    digest: str = ""

    def content_digest(self) -> str:
        return hashlib.sha256(self.model_dump_json(exclude={"digest"}).encode("utf-8")).hexdigest()

    def sealed(self) -> Self:
        """This file with its digest set, as it is written."""
        self.digest = self.content_digest()
        return self


class _StoredParams(_Digested):
    vocabulary_build_id: str
    training_cohorts: list[str]
    states: dict[str, dict[str, Any]]


@dataclass
class FittedBuilders:
    """Every registered builder fitted for scoring libraries outside ``training_groups``, by name."""

    training_libraries: list[str]
    training_groups: list[str]
    builders: dict[str, SetBuilder]
    notes: list[str] = field(default_factory=list)
    knowledge: KnowledgeView | None = None
    """curated cohorts of bundled libraries outside the held-out group (the transfer features' source)"""
    failed: dict[str, str] = field(default_factory=dict)
    """plug-in builders whose fit failed, with why (their methods are skipped saying so; the others run)"""
    origin: str = ""
    """which fit this is, so two users can tell whether their figures should agree: ``shipped fit <content
    signature>`` (installed from the fits shipped with phenoforge, the same on every machine) or ``local fit
    <signature>`` (made here)"""
    held_out: CopyHoldout | None = None
    """what the near-copy guard held out for the scored library (None: a library of the knowledge, a free query)"""
    routes: dict[str, FittedBuilders] = field(default_factory=dict)
    """query -> the builders that answer it instead: a scored cohort that nearly copies a bundled list is
    answered by builders fitted without that list's group (``for_query``)"""

    def for_query(self, query: str) -> FittedBuilders:
        """The builders that answer ``query``: its route when it has one, else these."""
        return self.routes.get(query, self)

    def builder(self, name: str) -> SetBuilder:
        """The fitted builder ``name`` (``UnknownBuilder`` for a name nothing registered)."""
        if name in self.failed:
            raise StateError(f"the {name} builder failed to fit ({self.failed[name]})")
        if name not in self.builders:
            builder_class(name)  # an unknown name says so, with the choices
            raise StateError(f"the {name} builder was registered after these builders were fitted: fit them again")
        return self.builders[name]

    def states(self) -> dict[str, dict[str, Any]]:
        """Every builder's fitted state, by name (what is stored; equal states build equal sets)."""
        return {name: builder.state() for name, builder in self.builders.items()}

    @property
    def learned(self) -> Learned | None:
        found = self.builders.get("learned")
        return found if isinstance(found, Learned) else None

    @property
    def model(self) -> MembershipModel | None:
        """The membership model answering a query on its own (None: too little training data)."""
        return self.learned.model_ if self.learned is not None else None

    @property
    def context_model(self) -> MembershipModel | None:
        """The membership model fitted with the library-context columns (:mod:`~phenoforge.setbuild.context`):
        it answers a library's cohorts built together; ``model`` answers a query built on its own."""
        return self.learned.context_model_ if self.learned is not None else None

    def in_context(self) -> FittedBuilders:
        """These builders with the context model answering ``learned`` (``self`` when there is none)."""
        learned = self.learned
        if learned is None or learned.context_model_ is None:
            return self
        return replace(self, builders={**self.builders, "learned": learned.in_context()})

    def check_may_score(self, library_id: str | None, group: str | None) -> None:
        """Raise ``LeakageError`` (fitted on it) or ``KnowledgeLeakError`` (its own curated lists would
        inform it) when these builders may not score that library."""
        if library_id in self.training_libraries or group in self.training_groups:
            raise LeakageError(
                f"builders fitted on {', '.join(self.training_libraries)} may not score {library_id or group!r}: "
                "fit them with that library's group held out"
            )
        if self.knowledge is not None:
            self.knowledge.check_excludes([group, library_group({"library_id": library_id}) if library_id else None])


def _fit_one(cls: type[SetBuilder], training: Training, failed: dict[str, str]) -> None:
    """Fit one builder into ``training.fitted``; a plug-in builder that fails is left out and said to have
    failed (in ``failed`` and the notes); phenoforge's own builders' errors are raised (they are bugs)."""
    try:
        fitted = cls().fit(training)
        if not isinstance(fitted, SetBuilder):
            raise TypeError(f"fit returned a {type(fitted).__name__}, not the fitted builder")
    except Exception as error:
        if not is_plugin(cls):
            raise
        failed[cls.name] = f"{type(error).__name__}: {error}"
        training.notes.append(f"set builder {cls.name} failed to fit ({failed[cls.name]}): its method is skipped")
        return
    training.fitted[cls.name] = fitted


def fit_stages() -> int:
    """Progress stages of a fit from scratch: the examples-only builders' parameters together, then each
    other builder's own steps."""
    return 1 + sum(cls.stages for cls in builder_classes().values() if not cls.examples_only)


class FitRefused(PhenoforgeError):
    """A fit asked for where fitting is refused (:func:`fits_refused`): stored fits are still reused."""


_FITS_REFUSED: ContextVar[str | None] = ContextVar("phenoforge_fits_refused", default=None)


@contextmanager
def fits_refused(reason: str) -> Iterator[None]:
    """Within this context (this thread, and the plug-in workers it starts), ``fit_builders`` reuses a stored
    fit but never fits: it raises :class:`FitRefused` with ``reason`` instead. The dashboard's pages run under
    it, so a page's button never starts a fit (fits belong to the first-run build Home shows)."""
    token = _FITS_REFUSED.set(reason)
    try:
        yield
    finally:
        _FITS_REFUSED.reset(token)


def fit_lock(held_out: Sequence[str]) -> AbstractContextManager[None]:
    """One fitter at a time per held-out key across threads and processes: the second waits, then finds the
    first one's bundle and reuses it. None when data/models cannot be written (nothing will be stored then)."""
    key = hashlib.sha1(json.dumps(sorted(held_out)).encode()).hexdigest()[:12]
    return lock_if_writable(models_dir() / f".fit-{key}.lock")


def fit_builders(
    con: duckdb.DuckDBPyConnection,
    dense: object | None,
    held_out_group: str | None = None,
    libraries: Sequence[Library] | None = None,
    progress: ProgressCallback | None = None,
    also_held_out: Sequence[str] = (),
) -> FittedBuilders:
    """Fit or reuse every registered builder on the bundled libraries outside ``held_out_group``.

    ``held_out_group=None`` trains on every bundled library (for a user's imported library or
    a free query). ``also_held_out`` names further groups of the scored library (its id's family
    when it declares another group). A too-small training set leaves ``learned`` without a model and
    says so in ``notes``. Under :func:`fits_refused` a fit that is not stored raises :class:`FitRefused`;
    otherwise one process at a time fits a held-out key (:func:`fit_lock`), the others wait and reuse it.
    """
    return _fit_builders(con, dense, held_out_group, libraries, progress, also_held_out, _FITS_REFUSED.get())


@dataclass
class FitInputs:
    """What a fit for one held-out key reads, and the signature its bundle is stored under."""

    hierarchy: Hierarchy
    libraries: list[Library]
    held_out: list[str]
    train_libraries: list[Library]
    knowledge: CuratedKnowledge
    held_key: str | None
    names: list[str]
    groups: list[str]
    signature: str


def fit_inputs(
    con: duckdb.DuckDBPyConnection,
    dense: object | None,
    held_out_group: str | None = None,
    libraries: Sequence[Library] | None = None,
    also_held_out: Sequence[str] = (),
    broken: list[str] | None = None,
) -> FitInputs:
    """The training libraries, curated knowledge and stored-bundle signature of the fit ``fit_builders`` makes
    for these arguments (``broken`` collects the libraries and knowledge that could not be read)."""
    broken = [] if broken is None else broken
    hierarchy = get_hierarchy(con)
    libraries = list(libraries) if libraries is not None else list_libraries(errors=broken)
    held_out = held_out_groups(held_out_group, also_held_out)
    train_libraries = training_libraries(libraries, held_out)
    knowledge = bundled_knowledge(con, hierarchy, dense, libraries)
    broken += knowledge.problems
    held_key = held_out_key(libraries, held_out, {g for c in knowledge.cohorts for g in c.groups})
    names, groups, signature = _fit_identity(hierarchy, train_libraries, dense, knowledge.digest, held_key)
    return FitInputs(hierarchy, libraries, held_out, train_libraries, knowledge, held_key, names, groups, signature)


@collections_paused()
def _fit_builders(
    con: duckdb.DuckDBPyConnection,
    dense: object | None,
    held_out_group: str | None,
    libraries: Sequence[Library] | None,
    progress: ProgressCallback | None,
    also_held_out: Sequence[str],
    refused: str | None = None,
    locked: bool = False,
) -> FittedBuilders:
    progress = progress or no_progress
    broken: list[str] = []
    inputs = fit_inputs(con, dense, held_out_group, libraries, also_held_out, broken)
    hierarchy, libraries, held_out, knowledge = inputs.hierarchy, inputs.libraries, inputs.held_out, inputs.knowledge
    train_libraries, held_key = inputs.train_libraries, inputs.held_key
    names, groups, signature = inputs.names, inputs.groups, inputs.signature
    view = knowledge.view(held_out)
    stored, unusable = _load_fitted(signature, hierarchy, names, groups)
    installed: str | None = None
    not_shipped = ""
    if stored is None:  # none on disk, or one that cannot be used: the fit shipped with phenoforge, when it matches
        installed, not_shipped = _install_shipped_fit(
            con, hierarchy, train_libraries, libraries, dense, held_key, signature
        )
        if installed is not None:
            stored, unusable = _load_fitted(signature, hierarchy, names, groups)
    if stored is None and refused is not None:
        raise FitRefused(refused)
    if stored is None and not locked:  # a fit to make: one fitter at a time, the next reuses its bundle
        with fit_lock(held_out):
            return _fit_builders(con, dense, held_out_group, libraries, progress, also_held_out, locked=True)
    examples: list[Example] = []
    if stored is None:
        readable: list[Library] = []
        for lib in train_libraries:
            try:
                found = _library_examples_cached(con, hierarchy, lib, dense, progress)
            except PhenoforgeError as error:  # an unreadable cohort file: leave the library out, say so
                broken.append(f"{lib.library_id} ({error})")
                continue
            if not found:  # it teaches nothing: it may not be reported as trained on
                broken.append(f"{lib.library_id} (no cohort with a code in this vocabulary)")
                continue
            examples += found
            readable.append(lib)
        if len(readable) != len(train_libraries):  # what is left may have been fitted before
            names, groups, signature = _fit_identity(hierarchy, readable, dense, knowledge.digest, held_key)
            stored, unusable = _load_fitted(signature, hierarchy, names, groups)
    if stored is not None:
        stored.notes += [installed] if installed else []
        stored.notes += [f"not used for fitting: {problem}" for problem in broken]
        stored.knowledge = view
        return stored
    notes: list[str] = [f"not used for fitting: {problem}" for problem in broken]
    if unusable:
        notes.append(unusable)
    if not_shipped:  # a fit of minutes instead of an install of seconds: say why
        notes.append(f"fitted here, not installed as shipped: {not_shipped}")
        log.warning("set builders fitted here, not installed as shipped: %s", not_shipped)
    # each stage takes from seconds to minutes: say which one runs, and for which held-out group
    what = f"set builders without {', '.join(held_out)}" if held_out else "set builders on every library"
    total = fit_stages()
    done = [0]

    def stage(message: str) -> None:
        progress(done[0], total, f"{what}: {message}")
        done[0] += 1

    # named by what the examples hold, not only by library ids: a re-imported library with other codes retrains
    # and by the choices it is given: a fit that chooses them here and one that takes the shipped ones store
    # their models in folders of their own (one would otherwise retrain and overwrite the other's)
    choices = fit_choices(names)
    key = f"{_examples_digest(examples)}-k{_knowledge_key(knowledge.digest, held_key, choices)}"
    training = Training(
        con,
        hierarchy,
        examples,
        names,
        dense is not None,
        knowledge,
        held_out,
        key,
        notes=notes,
        stage=stage,
        choices=choices,
    )
    if training.choices:
        other_code = any(part.get("code") == "other" for part in training.choices.get("learned", {}).values())
        notes.append(
            "the membership models' rules and tree variants were chosen out of fold on the same training groups "
            "when the shipped fits were made"
            + (", by fitting code other than this checkout's (its features may differ)" if other_code else "")
            + ": each model is fitted once here (PHENOFORGE_FIT_CHOICES=choose chooses them again)"
        )
    classes = builder_classes()
    tuned = [name for name, cls in classes.items() if cls.examples_only]
    stage(f"tuning the {' and '.join(tuned)} parameters")
    failed: dict[str, str] = {}
    training.fitted.update(_fit_examples_only(training, tuned, failed))
    for name, cls in classes.items():
        if name not in training.fitted and name not in failed:
            # each builder's steps have their own numbers, whether or not the one before took all of its own
            done[0] = 1 + sum(c.stages for n, c in classes.items() if not c.examples_only and n in training.fitted)
            _fit_one(cls, training, failed)
    progress(total, total, f"{what}: fitted")
    fitted = FittedBuilders(names, groups, dict(training.fitted), notes, view, failed, origin=f"local fit {signature}")
    _save_fitted(signature, fitted, hierarchy)
    return fitted


def bundled_knowledge(
    con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, dense: object | None, libraries: Sequence[Library]
) -> CuratedKnowledge:
    """The curated cohorts of every installed bundled library (a user's import is never knowledge)."""
    bundled = [lib for lib in libraries if not is_user_import(lib)]
    return curated_knowledge(con, hierarchy, bundled, library_stamp, embed_fn_of(dense), embed_identity_of(dense))


def _knowledge_key(knowledge_digest: str, held_out_group: str | None, choices: dict[str, Any] | None = None) -> str:
    parts: list[Any] = [knowledge_digest, held_out_group]
    if choices:  # appended only when given: a fit that makes its choices keeps the key it had
        parts.append(json.dumps(choices, sort_keys=True))
    return hashlib.sha1(json.dumps(parts).encode()).hexdigest()[:10]


def held_out_groups(held_out_group: str | None, also_held_out: Sequence[str] = ()) -> list[str]:
    """The groups a fit leaves out, in one order."""
    return sorted({g for g in [held_out_group, *also_held_out] if g})


def training_libraries(libraries: Sequence[Library], held_out: Sequence[str]) -> list[Library]:
    """The installed bundled libraries a fit without the ``held_out`` groups trains on."""
    return [
        lib
        for lib in libraries
        if is_training_library(lib.manifest) and not is_user_import(lib) and not groups_of(lib) & set(held_out)
    ]


def held_out_key(libraries: Sequence[Library], held_out: Sequence[str], knowledge_groups: set[str]) -> str | None:
    """The held-out groups a fit is stored under: only those an installed training library or a curated
    cohort of the knowledge (``knowledge_groups``) belongs to.

    A held-out group nothing belongs to (an import's own) changes nothing: the fit is stored and reused
    under the key of the groups that do, so an import reuses the free-query fit.
    """
    touched = set(knowledge_groups)
    touched |= {g for lib in libraries if is_training_library(lib.manifest) for g in groups_of(lib)}
    return ",".join(g for g in held_out if g in touched) or None


def _install_shipped_fit(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_libraries: Sequence[Library],
    libraries: Sequence[Library],
    dense: object | None,
    held_key: str | None,
    signature: str,
) -> tuple[str | None, str]:
    """Store the bundle shipped for exactly these inputs (:mod:`~phenoforge.setbuild.shipped_fits`) under
    ``signature``, as if fitted here: (the note that says so, ""), or (None, why none was installed)."""
    from phenoforge.setbuild.shipped_fits import why_not_shipped

    bundled = [lib for lib in libraries if not is_user_import(lib)]
    shipped, why = why_not_shipped(con, hierarchy, train_libraries, bundled, dense, held_key)
    if shipped is None:
        return None, why
    stored = _StoredFit(
        signature=signature,
        vocabulary_build_id=hierarchy.build_id,
        training_libraries=shipped.training_libraries,
        states=shipped.states,
        notes=shipped.notes,
        origin=f"shipped fit {shipped.signature}",
    )
    failed: list[str] = []
    _store(_fit_path(signature), stored.sealed().model_dump_json(indent=1), failed)
    return (None, f"the shipped fit could not be stored ({'; '.join(failed)})") if failed else (shipped.note, "")


def _fit_identity(
    hierarchy: Hierarchy,
    train_libraries: Sequence[Library],
    dense: object | None,
    knowledge_digest: str,
    held_out_group: str | None,
) -> tuple[list[str], list[str], str]:
    """The training libraries' ids, their groups, and the signature a fitted bundle is stored under."""
    names = sorted(lib.library_id for lib in train_libraries)
    groups = sorted({group for lib in train_libraries for group in groups_of(lib)})
    knowledge_key = _knowledge_key(knowledge_digest, held_out_group)
    signature = _fit_signature(hierarchy, train_libraries, dense, knowledge_key, fit_choices(names))
    return names, groups, signature


def fit_choices(training_library_ids: Sequence[str]) -> dict[str, Any]:
    """The choices a fit on these libraries takes as made when the shipped fits were (``Training.choices``);
    empty when it makes them here (none shipped for these training libraries, or ``PHENOFORGE_FIT_CHOICES=choose``)."""
    from phenoforge.setbuild.shipped_fits import shipped_choices

    return shipped_choices(training_library_ids)


def groups_of(library: Library) -> set[str]:
    """The groups a training library is held out with: its declared one and its id's family.

    A copy named ``cms-hcc-v28-old`` that declares group ``old`` is still a CMS-HCC library; holding
    it out only with ``old`` would let it train the builders that score CMS-HCC.
    """
    return {library_group(library.manifest), library_group({"library_id": library.library_id})}


def is_user_import(library: Library) -> bool:
    """A library the user imported (``library import``): only ever scored, whatever its id says.

    Bundled libraries are recognised by id, so a user's copy named ``cms-hcc-v28-mine`` would
    otherwise train the builders, and score (say) Elixhauser with a model fitted on a copy of it.
    """
    build = library.manifest.report.get("build")
    return isinstance(build, dict) and "imported_from" in build


# -- reuse: a fitted bundle on disk, keyed by what it was fitted on ------------------------------

_EXAMPLES: ProcessCache[tuple[str, str, str, bool, str], list[Example]] = ProcessCache("training examples")
_EXAMPLES_LOCK = threading.Lock()


def library_stamp(library: Library) -> str:
    """What a library's examples depend on: its manifest and every cohort file's bytes (:meth:`Library.stamp`)."""
    return library.stamp()


def _library_examples_cached(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    library: Library,
    dense: object | None,
    progress: ProgressCallback,
) -> list[Example]:
    """A library's training examples, computed once per process (each held-out group reuses them)."""
    key = (hierarchy.build_id, library.library_id, str(library.path), dense is not None, library_stamp(library))
    with _EXAMPLES_LOCK:
        cached = _EXAMPLES.get(key)
    if cached is None:
        cached = library_examples(con, library, dense, progress)
        with _EXAMPLES_LOCK:
            _EXAMPLES[key] = cached
    return cached


class _StoredFit(_Digested):
    signature: str
    vocabulary_build_id: str
    training_libraries: list[str]
    states: dict[str, dict[str, Any]]
    """each registered builder's fitted state, by name (``SetBuilder.state``)"""
    notes: list[str]
    origin: str = ""
    """where the fit was made: ``shipped fit <content signature>`` or ``local fit <signature>`` (empty: stored
    before this was recorded)"""


def _fit_signature(
    hierarchy: Hierarchy,
    train_libraries: Sequence[Library],
    dense: object | None,
    knowledge_key: str = "",
    choices: dict[str, Any] | None = None,
) -> str:
    """What a fitted bundle depends on: vocabulary build, training libraries, the dense index build,
    features, the curated knowledge the training cohorts saw, and the choices it was given (none: made here)."""
    dense_build = str(getattr(getattr(dense, "status", None), "built_at", "")) if dense is not None else None
    parts = [
        hierarchy.build_id,
        sorted((lib.library_id, library_stamp(lib)) for lib in train_libraries),
        dense_build,
        list(ALL_FEATURE_NAMES),
        knowledge_key,
        LEARNED_FORMAT_VERSION,
        LEARNED_RECIPE,
        list(builder_classes()),  # a builder registered since is fitted with the others, not found missing
        PARAMS_RECIPE,
        FIT_FORMAT_VERSION,
    ]
    if choices:  # appended only when given: a fit that makes its choices keeps the signature it had
        parts.append(json.dumps(choices, sort_keys=True))
    return hashlib.sha1(json.dumps(parts).encode()).hexdigest()[:16]


def _fit_path(signature: str) -> Path:
    return models_dir() / f"fitted-{signature}.json"


def _load_fitted(
    signature: str, hierarchy: Hierarchy, names: list[str], groups: list[str]
) -> tuple[FittedBuilders | None, str | None]:
    """The bundle fitted on exactly these libraries, vocabulary build and features, or why it cannot be used.

    ``(None, None)`` when there is none yet; ``(None, reason)`` when one exists but is unusable.
    """
    path = _fit_path(signature)
    try:
        stored = _StoredFit.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (ValidationError, ValueError, UnicodeDecodeError):
        return None, f"{path.name} is corrupt: refitted"
    except OSError as error:  # data/models is a file, or not readable
        return None, f"{path.name} cannot be read ({error.strerror or error}): refitted"
    if stored.digest != stored.content_digest():
        return None, f"{path.name} was edited or damaged after phenoforge wrote it: refitted"
    if stored.signature != signature or stored.training_libraries != names:
        return None, f"{path.name} was fitted on other libraries: refitted"
    builders: dict[str, SetBuilder] = {}
    for name, cls in builder_classes().items():
        if name not in stored.states:
            return None, f"{path.name} holds no fitted {name} builder: refitted"
        try:
            builders[name] = cls.from_state(stored.states[name], hierarchy, names)
        except StateError as error:
            return None, f"{path.name}: the {name} builder's {error}: refitted"
    notes = [f"reused the builders fitted on {', '.join(names) or 'nothing'} ({path.name})", *stored.notes]
    return FittedBuilders(names, groups, builders, notes, origin=stored.origin or f"local fit {signature}"), None


def _examples_digest(examples: Sequence[Example]) -> str:
    """What fitted pieces learn from: every training cohort's name and curated codes."""
    content = sorted((ex.key, ex.cohort_name, sorted(ex.truth)) for ex in examples)
    return hashlib.sha1(json.dumps(content).encode()).hexdigest()[:12]


def _save_fitted(signature: str, fitted: FittedBuilders, hierarchy: Hierarchy) -> None:
    """Keep every builder's fitted state; a builder whose files were not stored, or one that failed to fit,
    leaves the bundle unwritten (a bundle that names a model that is not there could not be loaded)."""
    if fitted.failed:
        fitted.notes.append(f"fitted builders not stored: {', '.join(fitted.failed)} failed to fit")
        return
    for builder in fitted.builders.values():
        if any(not (models_dir() / name).is_dir() for name in builder.stored_files()):
            return
    stored = _StoredFit(
        signature=signature,
        vocabulary_build_id=hierarchy.build_id,
        training_libraries=fitted.training_libraries,
        states={name: builder.state() for name, builder in fitted.builders.items()},
        notes=[note for builder in fitted.builders.values() for note in builder.training_notes()],
        origin=fitted.origin,
    )
    _store(_fit_path(signature), stored.sealed().model_dump_json(indent=1), fitted.notes)


def _store(path: Path, text: str, notes: list[str]) -> None:
    """Write a fitted piece; a data/models that cannot be written is a note (fitted for this run only), not a crash."""
    try:
        # a temporary unique to this writer: two threads or processes fitting one group at once would
        # otherwise share one temporary name, and the second rename would fail
        write_atomically(path, lambda handle: handle.write(text.encode("utf-8")))
    except OSError as error:
        notes.append(not_stored(path, error))


def _fit_examples_only(training: Training, names: list[str], failed: dict[str, str]) -> dict[str, SetBuilder]:
    """The builders whose fitted state depends on the examples alone, reused from their file when these very
    examples tuned them before (every held-out key with the same training cohorts shares it)."""
    notes = training.notes
    keys = sorted(ex.key for ex in training.examples)
    # the cohorts' codes and names are in the name: a library re-imported under the same ids is retuned
    path = models_dir() / params_file_name(keys, training.with_dense, _examples_digest(training.examples))
    classes = builder_classes()
    try:
        stored = _StoredParams.model_validate_json(path.read_text(encoding="utf-8"))
        if stored.digest != stored.content_digest():
            raise StateError("edited after phenoforge wrote it")
        if stored.vocabulary_build_id == training.hierarchy.build_id and stored.training_cohorts == keys:
            reused = {
                name: classes[name].from_state(stored.states[name], training.hierarchy, training.library_ids)
                for name in names
            }
            notes.append(f"reused tuned parameters {path.name}")
            return reused
        notes.append(f"{path.name} is stale (other vocabulary build or cohorts): retuned")
    except FileNotFoundError:
        pass
    except StateError as error:
        notes.append(f"{path.name} cannot be reused ({error}): retuned")
    except (ValidationError, ValueError, UnicodeDecodeError, KeyError):
        notes.append(f"{path.name} is corrupt: retuned")
    except OSError as error:
        notes.append(f"{path.name} cannot be read ({error.strerror or error}): retuned")
    for name in names:
        _fit_one(classes[name], training, failed)
    fitted = {name: training.fitted[name] for name in names if name in training.fitted}
    if not training.examples:
        notes.append("no bundled library to tune on: default parameters (untuned)")
        return fitted
    states = {name: builder.state() for name, builder in fitted.items()}
    params = _StoredParams(
        vocabulary_build_id=training.hierarchy.build_id, training_cohorts=keys, states=states
    ).sealed()
    _store(path, params.model_dump_json(indent=1), notes)
    notes.append(f"tuned parameters on {', '.join(training.library_ids)}")
    return fitted


def params_file_name(training_cohorts: Sequence[str], with_dense: bool, examples_digest: str) -> str:
    """The file the rule builders' parameters tuned on these cohorts are kept in (``training_cohorts``: every
    example's key, sorted; ``examples_digest``: what the cohorts hold, as the model folder's name says it)."""
    tuned = [name for name, cls in builder_classes().items() if cls.examples_only]
    key = [list(training_cohorts), with_dense, examples_digest, PARAMS_RECIPE, tuned]
    return f"builder-params-{hashlib.sha1(json.dumps(key).encode()).hexdigest()[:12]}.json"


# -- what the current state reads under data/models (``phenoforge.prune`` keeps these) -----------------

_FIT_MODEL_DIRECTORY = re.compile(r"^membership-[0-9a-f]{12}-(?P<examples>[0-9a-f]{12})-k[0-9a-f]{10}$")


def is_fit_model_directory(name: str) -> bool:
    """Whether a folder name is one ``fit_builders`` gives a membership model (bench scripts name theirs otherwise)."""
    return _FIT_MODEL_DIRECTORY.match(name) is not None


@dataclass(frozen=True)
class StoredFitFiles:
    """What one fit of the set builders reads under ``data/models``, found without fitting anything."""

    held_out: str | None
    """the held-out groups it is stored under (None: trained on every bundled library)"""
    fitted: str
    """the fitted bundle's file name"""
    found: bool
    """whether that bundle is there and readable (else which model and parameters a fit would reuse is not known)"""
    model_directory: str | None = None
    """the membership model folder the bundle names"""
    context_model_directory: str | None = None
    """the folder of the model fitted with the library-context columns, when the bundle names one"""

    def params_file(self, training_cohorts: Sequence[str], with_dense: bool) -> str | None:
        """The tuned-parameters file this fit was made with, were it tuned on ``training_cohorts`` (a stored
        parameters file's own list); None when the bundle names no model folder that says what the cohorts held."""
        match = _FIT_MODEL_DIRECTORY.match(self.model_directory or "")
        if match is None:
            return None
        return params_file_name(sorted(training_cohorts), with_dense, match["examples"])


def knowledge_identity(libraries: Sequence[Library]) -> tuple[list[tuple[str, str]], set[str]]:
    """The stamps the curated knowledge of these libraries is keyed by, and every group its cohorts may belong to
    (the knowledge itself is not read: a library without a usable cohort still counts)."""
    bundled = [lib for lib in libraries if not is_user_import(lib)]
    stamps = sorted((lib.library_id, library_stamp(lib)) for lib in bundled)
    return stamps, {g for lib in bundled for g in groups_of(lib)}


def stored_fit_files(
    hierarchy: Hierarchy,
    dense: object | None,
    libraries: Sequence[Library],
    held_out_group: str | None,
    also_held_out: Sequence[str] = (),
) -> StoredFitFiles:
    """The files ``fit_builders(con, dense, held_out_group, libraries, also_held_out=...)`` would read, were its
    fit stored: the same signature, computed from the libraries' stamps without reading the knowledge or fitting.

    A fit whose bundle is missing (not fitted yet, or fitted without a library whose files are unreadable) is
    ``found=False``: what it would reuse is decided only when it runs.
    """
    stamps, groups = knowledge_identity(libraries)
    held_out = held_out_groups(held_out_group, also_held_out)
    key = held_out_key(libraries, held_out, groups)
    train = training_libraries(libraries, held_out)
    _names, _groups, signature = _fit_identity(
        hierarchy, train, dense, knowledge_digest(stamps, dense is not None), key
    )
    path = _fit_path(signature)
    try:
        stored = _StoredFit.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError, ValueError, UnicodeDecodeError):
        return StoredFitFiles(key, path.name, found=False)
    learned = stored.states.get("learned", {})
    model_directory, context_model_directory = (learned.get(k) for k in ("model_directory", "context_model_directory"))
    folders = [d for d in (model_directory, context_model_directory) if d is not None]
    if stored.signature != signature or any(not isinstance(d, str) or Path(d).name != d for d in folders):
        return StoredFitFiles(key, path.name, found=False)
    return StoredFitFiles(
        key, path.name, found=True, model_directory=model_directory, context_model_directory=context_model_directory
    )


def robust_query(con: duckdb.DuckDBPyConnection, query: str) -> tuple[str, dict[str, str]]:
    """The typo-corrected query to run the retrievers with, and the umbrella nodes of it (code -> text)."""
    hierarchy = get_hierarchy(con)
    searched = get_typo_corrector(con, hierarchy.build_id).correct(query).corrected
    return searched, {hierarchy.code[n]: text for n, text in umbrella_nodes(con, hierarchy, searched).items()}


def candidate_table(
    hierarchy: Hierarchy,
    query: str,
    bm25: list[tuple[str, float]],
    dense: list[tuple[str, float]] | None,
    searched_as: str | None = None,
    umbrellas: dict[str, str] | None = None,
    dense_weight: float = 0.5,
    bm25_ids: RankedIds | None = None,
    dense_ids: RankedIds | None = None,
) -> CandidateTable:
    """The candidate table every builder chooses from, for one query's rankings (``bm25_ids`` and
    ``dense_ids``: the same rankings as concept ids, when the caller has them; see ``candidates.Retrieval``)."""
    retrieval = Retrieval(
        query=query,
        bm25=bm25,
        dense=dense,
        dense_weight=dense_weight,
        searched_as=searched_as,
        umbrellas=umbrellas or {},
        bm25_ids=bm25_ids,
        dense_ids=dense_ids,
    )
    return build_candidates(hierarchy, retrieval)


def build_set(
    hierarchy: Hierarchy,
    fitted: FittedBuilders,
    method: str,
    table: CandidateTable,
    scored_library_id: str | None = None,
    scored_group: str | None = None,
    built: dict[str, BuiltSet] | None = None,
    probabilities: np.ndarray | None = None,
) -> BuiltSet:
    """One fitted builder's code list for one query's candidate table (:func:`candidate_table`).

    ``built`` holds sets other builders already built from the same table (``curated_transfer`` falls
    back to the learned set: given, it is not built again); ``probabilities`` (the membership model's for
    ``table``, predicted with other queries' in one call) spares the model call.
    """
    builder = fitted.builder(method)
    fitted.check_may_score(scored_library_id, scored_group)
    inputs = BuildInputs(
        hierarchy,
        table,
        knowledge=fitted.knowledge,
        scored_library_id=scored_library_id,
        scored_group=scored_group,
        peers=fitted.builders,
        built=built if built is not None else {},
        probabilities=probabilities,
    )
    answer = builder.build(inputs)
    if not isinstance(answer, BuiltSet):
        raise TypeError(f"set builder {method} answered a {type(answer).__name__}, not a BuiltSet")
    return answer

"""The curated knowledge of the installed libraries: built once, kept on disk, reused while current.

Also which groups a scored library copies (exactly or nearly), and the embedding a dense index offers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from phenoforge.caches import ProcessCache
from phenoforge.config import data_dir
from phenoforge.engine.curated import Library, load_curated_concept_set
from phenoforge.engine.expansion import Hierarchy
from phenoforge.errors import LibraryError
from phenoforge.eval.models import SYSTEMIC_SHARE, CopyHoldout, CopyPair
from phenoforge.setbuild.groups import library_group
from phenoforge.setbuild.knowledge import (
    TRANSFER_VERSION,
    CuratedKnowledge,
    EmbedFn,
    KnownCohort,
    library_groups,
    name_words,
    polarity,
)
from phenoforge.storage import write_atomically

log = logging.getLogger(__name__)

_KNOWLEDGE: ProcessCache[tuple[object, ...], CuratedKnowledge] = ProcessCache("curated knowledge")
_KNOWLEDGE_LOCK = threading.Lock()


def _library_cohorts(
    con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, library: Library, skip_unreadable: bool = False
) -> list[KnownCohort]:
    groups = library_groups(library)
    out = []
    for entry in library.manifest.cohorts:
        try:
            curated = load_curated_concept_set(con, library, entry.cohort_id)  # opened: no manifest read per cohort
        except LibraryError:
            if skip_unreadable:
                continue
            raise
        ids = sorted({node for node in map(hierarchy.resolve, curated.codes) if node is not None})
        if not ids:
            continue
        categories: Counter[int] = Counter()
        for node in ids:
            cat = hierarchy.ancestor_of_kind(node, "category")
            if cat is not None:
                categories[cat] += 1
        out.append(
            KnownCohort(
                library_id=library.library_id,
                groups=groups,
                cohort_id=entry.cohort_id,
                cohort_name=curated.cohort_name,
                ids=np.asarray(ids, dtype=np.int64),
                categories=categories,
                words=name_words(curated.cohort_name),
                polarity=polarity(curated.cohort_name),
            )
        )
    return out


def curated_knowledge(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    libraries: Sequence[Library],
    stamp: Callable[[Library], str],
    embed: EmbedFn | None = None,
    embed_identity: str | None = None,
) -> CuratedKnowledge:
    """The knowledge of ``libraries`` (bundled ones; the caller leaves user imports out), cached per process.

    A library whose cohort files cannot be read is left out and named in ``problems``. The knowledge
    is also stored in ``data/models`` (``stored_knowledge``) when every library was read and the
    embedding, if any, declares ``embed_identity`` (what its vectors depend on).
    """
    stamps = sorted((lib.library_id, stamp(lib)) for lib in libraries)
    # the embedding's identity too: another embedder in this process (another precision) gets its own vectors
    key = (hierarchy.build_id, json.dumps(stamps), embed is not None, embed_identity or None)
    with _KNOWLEDGE_LOCK:
        cached = _KNOWLEDGE.get(key)
    if cached is not None:
        return cached
    digest = knowledge_digest(stamps, embed is not None)
    identity = (embed_identity or None) if embed is not None else "no embedding"
    path = knowledge_path(hierarchy.build_id, stamps, identity) if identity is not None else None
    knowledge = None
    if path is not None and path.is_file():
        try:
            knowledge = load_knowledge(path, hierarchy, stamps, identity or "")
        except KnowledgeFileError as error:
            log.warning("curated knowledge unusable, built again: %s", error)
    if knowledge is None:
        knowledge = _computed_knowledge(con, hierarchy, libraries, embed, stored=path is not None)
        if path is not None and not knowledge.problems:
            try:
                save_knowledge(knowledge, path, hierarchy.build_id, stamps, identity or "")
            except OSError as error:
                log.warning(
                    "curated knowledge not stored (%s): built again by the next process", error.strerror or error
                )
    knowledge.embed = embed if knowledge.vectors is not None else None
    knowledge.digest = digest
    with _KNOWLEDGE_LOCK:
        _KNOWLEDGE[key] = knowledge
    return knowledge


def knowledge_digest(stamps: Sequence[tuple[str, str]], embedded: bool) -> str:
    """What a fit learns from the knowledge of libraries with these stamps (``CuratedKnowledge.digest``)."""
    return hashlib.sha1(json.dumps([list(map(list, stamps)), embedded, TRANSFER_VERSION]).encode()).hexdigest()[:12]


def _computed_knowledge(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    libraries: Sequence[Library],
    embed: EmbedFn | None,
    stored: bool,
) -> CuratedKnowledge:
    """The knowledge read from the libraries' files and embedded now (``stored``: with the single-name vectors)."""
    cohorts: list[KnownCohort] = []
    problems: list[str] = []
    for library in libraries:
        try:
            cohorts += _library_cohorts(con, hierarchy, library)
        except LibraryError as error:
            problems.append(f"{library.library_id} left out of the curated knowledge ({error})")
    vectors = None
    singles: dict[str, np.ndarray] = {}
    if embed is not None and cohorts:
        vectors = np.asarray(embed([c.cohort_name for c in cohorts]), dtype=np.float32)
        if stored and not problems:  # each name alone, as ``query_vector`` embeds a query (once per data dir)
            for name in dict.fromkeys(c.cohort_name for c in cohorts):
                singles[name] = np.asarray(embed([name]), dtype=np.float32)[0]
    return CuratedKnowledge(cohorts, vectors, problems=problems, single_vectors=singles)


# -- the knowledge stored in data/models (read in milliseconds instead of seconds of file reading and embedding)

KNOWLEDGE_FORMAT = 1


class KnowledgeFileError(ValueError):
    """A stored curated knowledge that cannot be used (corrupt, another build, libraries or embedding)."""


def knowledge_path(build: str, stamps: Sequence[tuple[str, str]], identity: str) -> Path:
    """Where the knowledge of these libraries (``stamps``: id and content stamp of each) is kept for vocabulary
    build ``build`` and the embedding ``identity``: the name says all three, so another state is another file."""
    key = hashlib.sha1(json.dumps([build, list(map(list, stamps)), identity, TRANSFER_VERSION]).encode())
    return data_dir() / "models" / f"curated-knowledge-{build}-{key.hexdigest()[:16]}-v{KNOWLEDGE_FORMAT}.npz"


def _knowledge_arrays(knowledge: CuratedKnowledge) -> dict[str, np.ndarray]:
    cohorts = knowledge.cohorts
    categories = [sorted(c.categories.items()) for c in cohorts]
    names = [c.cohort_name for c in cohorts]
    arrays = {
        "library_ids": np.array([c.library_id for c in cohorts], dtype=str),
        "cohort_ids": np.array([c.cohort_id for c in cohorts], dtype=str),
        "cohort_names": np.array(names, dtype=str),
        "groups": np.array([json.dumps(sorted(c.groups)) for c in cohorts], dtype=str),
        "id_offsets": np.concatenate([[0], np.cumsum([len(c.ids) for c in cohorts])]).astype(np.int64),
        "ids": np.concatenate([c.ids for c in cohorts] or [np.zeros(0)]).astype(np.int64),
        "category_offsets": np.concatenate([[0], np.cumsum([len(c) for c in categories])]).astype(np.int64),
        "category_ids": np.array([cat for c in categories for cat, _n in c], dtype=np.int64),
        "category_counts": np.array([n for c in categories for _cat, n in c], dtype=np.int64),
    }
    if knowledge.vectors is not None:
        arrays["vectors"] = knowledge.vectors
        single_names = sorted(knowledge.single_vectors)
        arrays["single_names"] = np.array(single_names, dtype=str)
        arrays["single_vectors"] = np.stack([knowledge.single_vectors[n] for n in single_names]).astype(np.float32)
    return arrays


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{value.dtype.str}:{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def save_knowledge(
    knowledge: CuratedKnowledge, path: Path, build: str, stamps: Sequence[tuple[str, str]], identity: str
) -> None:
    """Write the knowledge atomically (a temporary sibling, then a rename); plain arrays, no pickles, with a
    checksum of every array so a file changed afterwards is refused."""
    arrays: dict[str, Any] = _knowledge_arrays(knowledge)
    meta = {"format": KNOWLEDGE_FORMAT, "build_id": build, "stamps": list(map(list, stamps)), "identity": identity}
    arrays["meta"] = np.array(json.dumps(meta))
    arrays["checksum"] = np.array(_checksum(arrays))
    write_atomically(path, lambda handle: np.savez(handle, **arrays))


def load_knowledge(
    path: Path, hierarchy: Hierarchy, stamps: Sequence[tuple[str, str]], identity: str
) -> CuratedKnowledge:
    """The stored knowledge of these libraries, build and embedding, or ``KnowledgeFileError`` saying why not."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise KnowledgeFileError(f"{path}: cannot be read ({type(error).__name__}: {error})") from None
    needed = {"meta", "checksum", *_knowledge_arrays(CuratedKnowledge([])).keys()}
    missing = needed - set(arrays)
    if missing:
        raise KnowledgeFileError(f"{path}: lacks {', '.join(sorted(missing))}")
    checksum = str(arrays.pop("checksum"))
    if _checksum(arrays) != checksum:
        raise KnowledgeFileError(f"{path}: its arrays do not match their checksum (changed after writing)")
    try:
        meta = json.loads(str(arrays.pop("meta")))
        made_for = (meta["format"], meta["build_id"], meta["stamps"], meta["identity"])
    except (ValueError, KeyError, TypeError):
        raise KnowledgeFileError(f"{path}: no readable description") from None
    wanted = (KNOWLEDGE_FORMAT, hierarchy.build_id, list(map(list, stamps)), identity)
    for what, found, expected in zip(
        ("format", "vocabulary build", "libraries", "embedding"), made_for, wanted, strict=True
    ):
        if found != expected:
            raise KnowledgeFileError(f"{path}: made for another {what} ({str(found)[:80]})")
    for name in ("library_ids", "cohort_ids", "cohort_names", "groups", "single_names"):
        if name in arrays and (arrays[name].dtype.kind != "U" or arrays[name].ndim != 1):
            raise KnowledgeFileError(f"{path}: {name} are {arrays[name].dtype} {arrays[name].shape}, not 1-d text")
    for name in ("id_offsets", "ids", "category_offsets", "category_ids", "category_counts"):
        if arrays[name].dtype != np.int64 or arrays[name].ndim != 1:
            raise KnowledgeFileError(f"{path}: {name} are {arrays[name].dtype} {arrays[name].shape}, not 1-d int64")
    try:
        group_sets = [frozenset(map(str, json.loads(groups))) for groups in arrays["groups"].tolist()]
    except (ValueError, TypeError):
        raise KnowledgeFileError(f"{path}: library groups that are not lists of names") from None
    n = len(arrays["cohort_names"])
    id_offsets, category_offsets = arrays["id_offsets"], arrays["category_offsets"]
    ids, category_ids, category_counts = arrays["ids"], arrays["category_ids"], arrays["category_counts"]
    for offsets, values in ((id_offsets, ids), (category_offsets, category_ids)):
        if len(offsets) != n + 1 or offsets[0] != 0 or offsets[-1] != len(values) or (np.diff(offsets) < 0).any():
            raise KnowledgeFileError(f"{path}: offsets do not add up")
    if any(len(arrays[name]) != n for name in ("library_ids", "cohort_ids", "groups")):
        raise KnowledgeFileError(f"{path}: per-cohort arrays of different lengths")
    if len(category_counts) != len(category_ids):
        raise KnowledgeFileError(f"{path}: category counts do not match their categories")
    known = hierarchy.code
    if any(int(node) not in known for node in np.unique(np.concatenate([ids, category_ids])).tolist()):
        raise KnowledgeFileError(f"{path}: a concept id outside vocabulary build {hierarchy.build_id}")
    vectors = arrays.get("vectors")
    singles: dict[str, np.ndarray] = {}
    if identity != "no embedding":
        single_names = arrays.get("single_names")
        single_vectors = arrays.get("single_vectors")
        if vectors is None or single_names is None or single_vectors is None:
            raise KnowledgeFileError(f"{path}: lacks the name vectors")
        if vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != n:
            raise KnowledgeFileError(f"{path}: vectors are {vectors.dtype} {vectors.shape}, not {n} float32 rows")
        if single_vectors.dtype != np.float32 or single_vectors.shape != (len(single_names), vectors.shape[1]):
            raise KnowledgeFileError(f"{path}: single-name vectors are {single_vectors.dtype} {single_vectors.shape}")
        if not (np.isfinite(vectors).all() and np.isfinite(single_vectors).all()):
            raise KnowledgeFileError(f"{path}: vectors that are not finite numbers")
        if len(set(single_names.tolist())) != len(single_names):
            raise KnowledgeFileError(f"{path}: a single-name vector stored twice")
        singles = dict(zip(single_names.tolist(), single_vectors, strict=True))
    elif vectors is not None:
        raise KnowledgeFileError(f"{path}: vectors stored for a knowledge without embedding")
    names = arrays["cohort_names"].tolist()
    cohorts = []
    offsets, cat_bounds = id_offsets.tolist(), category_offsets.tolist()
    for i, (library_id, cohort_id, groups) in enumerate(
        zip(arrays["library_ids"].tolist(), arrays["cohort_ids"].tolist(), group_sets, strict=True)
    ):
        categories = Counter(
            dict(
                zip(
                    category_ids[cat_bounds[i] : cat_bounds[i + 1]].tolist(),
                    category_counts[cat_bounds[i] : cat_bounds[i + 1]].tolist(),
                    strict=True,
                )
            )
        )
        cohorts.append(
            KnownCohort(
                library_id=library_id,
                groups=groups,
                cohort_id=cohort_id,
                cohort_name=names[i],
                ids=ids[offsets[i] : offsets[i + 1]].copy(),
                categories=categories,
                words=name_words(names[i]),
                polarity=polarity(names[i]),
            )
        )
    return CuratedKnowledge(cohorts, vectors, single_vectors=singles)


COPY_JACCARD = 0.8
"""Two cohorts' code sets at least this similar (Jaccard) are one list, copied and edited, not two curations.

Chosen from what the benchmark measures, not from any library's scores: a knowledge list at Jaccard J
with a scored list would, handed in unchanged, score exact F1 = 2J / (1 + J) on it; at 0.8 that is
0.89, an answer key with a code or two off, far above what any method reaches honestly (means near
0.5-0.6). Put as edits: J >= 0.8 allows at most one code added or dropped per four shared, so one
changed code is caught in any list of 9 codes or more ((n - 1) / (n + 1) >= 0.8). Holding a group out
needlessly costs a little transfer; scoring a copy with its source inflates a score (0.965 against
0.573), so the threshold errs towards holding out. A shorter list with one code changed already
differs from its source as much as two independent curations do, and is not caught."""


def near_copy_pairs(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    knowledge: CuratedKnowledge,
    library: Library,
    excluded_groups: Iterable[str] = (),
) -> tuple[list[CopyPair], int]:
    """Every (scored cohort, knowledge cohort) pair whose code sets are at least :data:`COPY_JACCARD` alike,
    best first per scored cohort, and how many of ``library``'s cohorts were compared.

    The knowledge's cohorts of ``library`` itself and of ``excluded_groups`` (already hidden) are not
    compared. One sparse product over the scored library's codes: milliseconds for 2,000 lists.
    """
    from scipy import sparse  # type: ignore[import-untyped]  # only here: the copy check (no stubs installed)

    scored_cohorts = _library_cohorts(con, hierarchy, library, skip_unreadable=True)
    hidden = set(excluded_groups)
    known = [c for c in knowledge.cohorts if c.library_id != library.library_id and not c.groups & hidden]
    scored = [c.ids for c in scored_cohorts]
    if not scored or not known:
        return [], len(scored)
    universe = np.unique(np.concatenate(scored))

    def matrix(lists: Sequence[np.ndarray]) -> Any:
        """Cohorts by the scored library's codes (codes it never lists cannot be shared)."""
        kept = [ids[np.isin(ids, universe)] for ids in lists]
        columns = np.searchsorted(universe, np.concatenate(kept))
        pointers = np.cumsum([0, *map(len, kept)])
        ones = np.ones(len(columns), dtype=np.int32)
        return sparse.csr_matrix((ones, columns, pointers), shape=(len(kept), len(universe)))

    shared = (matrix([c.ids for c in known]) @ matrix(scored).T).tocoo()  # codes each pair has in common
    sizes_known = np.array([len(c.ids) for c in known])
    sizes_scored = np.array([len(ids) for ids in scored])
    jaccard = shared.data / (sizes_known[shared.row] + sizes_scored[shared.col] - shared.data)
    near = np.flatnonzero(jaccard >= COPY_JACCARD)
    order = sorted(near.tolist(), key=lambda i: (int(shared.col[i]), -float(jaccard[i]), int(shared.row[i])))
    pairs = [
        CopyPair(
            scored_cohort=scored_cohorts[int(shared.col[i])].cohort_id,
            scored_name=scored_cohorts[int(shared.col[i])].cohort_name,
            library_id=known[int(shared.row[i])].library_id,
            cohort_id=known[int(shared.row[i])].cohort_id,
            jaccard=round(float(jaccard[i]), 4),
            groups=sorted(known[int(shared.row[i])].groups),
        )
        for i in order
    ]
    return pairs, len(scored)


def copy_holdout(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    knowledge: CuratedKnowledge,
    library: Library,
    excluded_groups: Iterable[str] = (),
    installed: Sequence[Library] = (),
) -> CopyHoldout:
    """What scoring ``library`` must hold out of the curated knowledge and the fits: every knowledge cohort
    that is a near copy of one of its lists (:func:`near_copy_pairs`), and whole every group copying from
    which is systemic: more than :data:`~phenoforge.eval.models.SYSTEMIC_SHARE` of one of the group's
    libraries' cohorts, or of the scored library's cohorts, are near copies between the two.

    A user's import is never knowledge and declares its own group, so a copy of a bundled library under
    another id and group, even with a code changed per cohort, would otherwise be scored with the very
    lists it copies; an independent classification that agrees with a few bundled lists loses those lists
    only, and keeps the builders trained on the rest. A group is named as its libraries declare it in
    ``installed`` (the name the fits held out for a bundled library are stored under), else by every name
    its cohorts answer to.
    """
    pairs, n_scored = near_copy_pairs(con, hierarchy, knowledge, library, excluded_groups)
    out = CopyHoldout(threshold=COPY_JACCARD, systemic_share=SYSTEMIC_SHARE, pairs=pairs, scored_cohorts=n_scored)
    if not pairs:
        return out
    hidden = set(excluded_groups)
    size: Counter[str] = Counter(c.library_id for c in knowledge.cohorts if not c.groups & hidden)
    groups_of_library = {c.library_id: c.groups for c in knowledge.cohorts}
    named = {lib.library_id: library_group(lib.manifest) for lib in installed}
    copied = {library_id: {p.cohort_id for p in pairs if p.library_id == library_id} for library_id in size}
    copying: dict[str, set[str]] = {}  # group -> the scored cohorts with a near copy in it
    for pair in pairs:
        for group in [named[pair.library_id]] if pair.library_id in named else groups_of_library[pair.library_id]:
            copying.setdefault(group, set()).add(pair.scored_cohort)
    for library_id, cohorts in sorted(copied.items()):
        share = len(cohorts) / size[library_id]
        if share > SYSTEMIC_SHARE:
            for group in [named[library_id]] if library_id in named else sorted(groups_of_library[library_id]):
                out.groups.setdefault(
                    group,
                    f"{len(cohorts)} of {library_id}'s {size[library_id]} cohorts are near copies of scored lists",
                )
    for group, scored in sorted(copying.items()):
        if n_scored and len(scored) / n_scored > SYSTEMIC_SHARE:
            out.groups.setdefault(group, f"{len(scored)} of the {n_scored} scored cohorts are near copies of its lists")
    return out


def copied_groups(
    con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, knowledge: CuratedKnowledge, library: Library
) -> set[str]:
    """Groups of the knowledge's libraries that list a cohort with exactly, or nearly, the codes of one
    of ``library``'s (any pair at :data:`COPY_JACCARD`): what every group would be held out for before the
    guard held out cohorts (:func:`copy_holdout`)."""
    pairs, _n = near_copy_pairs(con, hierarchy, knowledge, library)
    groups = {c.library_id: c.groups for c in knowledge.cohorts}
    return {group for pair in pairs for group in groups[pair.library_id]}


def embed_identity_of(dense: object | None) -> str | None:
    """The identity of the dense retriever's embedding (``engine.dense.model.embed_identity``), None without one."""
    if dense is None:
        return None
    from phenoforge.engine.dense.model import embed_identity

    return embed_identity(getattr(dense, "embed_fn", None))


def embed_fn_of(dense: object | None) -> EmbedFn | None:
    """The dense retriever's query embedding (None without a dense index): its cached one when it has
    it, so a cohort name the dense ranking embedded is not embedded again."""
    if dense is None:
        return None
    return getattr(dense, "query_embed_fn", None) or getattr(dense, "embed_fn", None)

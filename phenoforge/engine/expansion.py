"""The ICD-10-CM hierarchy in memory: lookup, ancestor chains, descendant and ancestor expansion.

The benchmark's inner loop asks for thousands of ancestor chains; one database round trip each
would dominate its run time. The whole hierarchy (about 98k nodes) is read once per database build
and kept, keyed by the build id, so every connection to the same build shares it.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

import duckdb

from phenoforge.caches import ProcessCache
from phenoforge.engine.codes import code_key
from phenoforge.engine.db import build_id
from phenoforge.engine.models import Concept
from phenoforge.engine.schema import ICD10CM


@dataclass
class Hierarchy:
    """ICD-10-CM nodes and 'Is a' edges of one database build."""

    build_id: str
    id_by_key: dict[str, int]
    code: dict[int, str]
    name: dict[int, str]
    kind: dict[int, str]
    billable: dict[int, bool]
    parents: dict[int, tuple[int, ...]]
    children: dict[int, tuple[int, ...]]
    _chains: dict[int, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _levels: dict[int, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _id_by_code: dict[str, int] = field(default_factory=dict, repr=False)
    _kind_ancestors: dict[tuple[int, str], int | None] = field(default_factory=dict, repr=False)
    _billable_below: dict[int, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _is_tree: bool | None = field(default=None, repr=False)

    @property
    def is_tree(self) -> bool:
        """Whether every node has at most one parent (ICD-10-CM does; Athena's 'Is a' graph may not)."""
        if self._is_tree is None:
            self._is_tree = all(len(parents) <= 1 for parents in self.parents.values())
        return self._is_tree

    def ids_by_display_code(self) -> dict[str, int]:
        """Display code (``E11.22``) -> concept id, where ``resolve`` gives that id: a plain dict
        lookup for loops over thousands of ranked codes (read only)."""
        if not self._id_by_code and self.code:
            # only where the normalised lookup agrees (a code shared by two concepts resolves as before)
            self._id_by_code.update(
                (code, node) for node, code in self.code.items() if self.id_by_key.get(code_key(code) or "") == node
            )
        return self._id_by_code

    def resolve(self, raw: str) -> int | None:
        """Concept id of a code as typed (``E1122``, ``e11.22``, `` E11.22 ``), or None."""
        found = self.ids_by_display_code().get(raw) if isinstance(raw, str) else None
        if found is not None:  # the display form, as every ranking and run spells it: no normalising
            return found
        key = code_key(raw)
        return self.id_by_key.get(key) if key is not None else None

    def chain(self, concept_id: int) -> tuple[int, ...]:
        """Self first, then ancestors nearest first (breadth-first over parents) to the root."""
        cached = self._chains.get(concept_id)
        if cached is not None:
            return cached
        order: list[int] = [concept_id]
        levels: list[int] = [0]
        seen = {concept_id}
        queue = deque([(concept_id, 0)])
        while queue:
            node, level = queue.popleft()
            for parent in self.parents.get(node, ()):
                if parent not in seen:
                    seen.add(parent)
                    order.append(parent)
                    levels.append(level + 1)
                    queue.append((parent, level + 1))
        result = tuple(order)
        self._chains[concept_id] = result
        self._levels[concept_id] = tuple(levels)
        return result

    def ancestor_of_kind(self, concept_id: int, kind: str) -> int | None:
        """The nearest node of ``kind`` at or above ``concept_id`` (``category``, ``block``...), memoised."""
        key = (concept_id, kind)
        if key not in self._kind_ancestors:
            self._kind_ancestors[key] = next((n for n in self.chain(concept_id) if self.kind.get(n) == kind), None)
        return self._kind_ancestors[key]

    def chain_levels(self, concept_id: int) -> tuple[int, ...]:
        """Edges from ``concept_id`` up to each node of its chain (equal to the position on a tree)."""
        if concept_id not in self._levels:
            self.chain(concept_id)
        return self._levels[concept_id]

    def descendants(self, concept_id: int) -> list[int]:
        """Every node below ``concept_id`` (not itself), in vocabulary order."""
        seen: set[int] = set()
        stack = list(self.children.get(concept_id, ()))
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(self.children.get(node, ()))
        return sorted(seen)

    def billable_descendants(self, concept_id: int) -> tuple[int, ...]:
        """The billable codes a node stands for (itself when billable, else its billable
        descendants, in vocabulary order), memoised: set builders ask for the same nodes per query."""
        found = self._billable_below.get(concept_id)
        if found is None:
            if self.billable.get(concept_id, False):
                found = (concept_id,)
            else:
                found = tuple(node for node in self.descendants(concept_id) if self.billable.get(node, False))
            self._billable_below[concept_id] = found
        return found

    def concept(self, concept_id: int) -> Concept:
        return Concept(
            concept_id=concept_id,
            vocabulary_id=ICD10CM,
            code=self.code[concept_id],
            name=self.name[concept_id],
            kind=self.kind[concept_id],
            billable=self.billable[concept_id],
        )


_CACHE: ProcessCache[str, Hierarchy] = ProcessCache("hierarchies")
_CACHE_LOCK = threading.Lock()
_CONNECTION_BUILDS: dict[int, tuple[duckdb.DuckDBPyConnection, str]] = {}


def _load(con: duckdb.DuckDBPyConnection, build: str) -> Hierarchy:
    rows = con.execute(
        "SELECT concept_id, code, code_key, name, kind, billable FROM concept "
        "WHERE vocabulary_id = ? ORDER BY concept_id",
        [ICD10CM],
    ).fetchall()
    edges = con.execute(
        "SELECT p.child_id, p.parent_id FROM concept_parent p "
        "JOIN concept c ON c.concept_id = p.child_id WHERE c.vocabulary_id = ? "
        "ORDER BY p.child_id, p.parent_id",
        [ICD10CM],
    ).fetchall()
    parents: dict[int, list[int]] = {}
    children: dict[int, list[int]] = {}
    for child, parent in edges:
        parents.setdefault(child, []).append(parent)
        children.setdefault(parent, []).append(child)
    return Hierarchy(
        build_id=build,
        id_by_key={key: concept_id for concept_id, _c, key, _n, _k, _b in rows},
        code={concept_id: code for concept_id, code, *_ in rows},
        name={concept_id: name for concept_id, _c, _k, name, *_ in rows},
        kind={row[0]: row[4] for row in rows},
        billable={row[0]: bool(row[5]) for row in rows},
        parents={node: tuple(values) for node, values in parents.items()},
        children={node: tuple(sorted(values)) for node, values in children.items()},
    )


def get_hierarchy(con: duckdb.DuckDBPyConnection) -> Hierarchy:
    """The in-memory hierarchy of ``con``'s database, read once per build and shared."""
    known = _CONNECTION_BUILDS.get(id(con))
    if known is not None and known[0] is con:
        cached = _CACHE.get(known[1])
        if cached is not None:
            return cached
    cursor = con.cursor()
    try:
        build = build_id(cursor)
        with _CACHE_LOCK:
            hierarchy = _CACHE.get(build)
            if hierarchy is None:
                hierarchy = _load(cursor, build)
                _CACHE[build] = hierarchy
            _CONNECTION_BUILDS[id(con)] = (con, build)
    finally:
        cursor.close()
    return hierarchy


def lookup(con: duckdb.DuckDBPyConnection, code: str) -> Concept | None:
    """The concept for a code as people type it, or None for an unknown code."""
    hierarchy = get_hierarchy(con)
    concept_id = hierarchy.resolve(code)
    return hierarchy.concept(concept_id) if concept_id is not None else None


def ancestor_chain_ids(con: duckdb.DuckDBPyConnection, code: str) -> list[int]:
    """``[self_id, parent_id, ..., root_id]``: self-inclusive, nearest first; ``[]`` if unknown."""
    hierarchy = get_hierarchy(con)
    concept_id = hierarchy.resolve(code)
    return list(hierarchy.chain(concept_id)) if concept_id is not None else []


def expand_descendants(con: duckdb.DuckDBPyConnection, code: str, include_self: bool = True) -> list[str]:
    """Codes at and below ``code`` in vocabulary order; ``[]`` for an unknown code."""
    hierarchy = get_hierarchy(con)
    concept_id = hierarchy.resolve(code)
    if concept_id is None:
        return []
    ids = ([concept_id] if include_self else []) + hierarchy.descendants(concept_id)
    return [hierarchy.code[node] for node in ids]


def expand_ancestors(con: duckdb.DuckDBPyConnection, code: str, include_self: bool = False) -> list[str]:
    """Codes above ``code``, nearest first up to its chapter; ``[]`` for an unknown code."""
    chain = ancestor_chain_ids(con, code)
    hierarchy = get_hierarchy(con)
    return [hierarchy.code[node] for node in (chain if include_self else chain[1:])]

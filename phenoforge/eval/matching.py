"""The one nearest-match computation: every score, the slider and the drilldown go through it.

For a set of target codes, an ancestor table records for each ancestor ``x`` the fewest edges
from any target up to ``x`` (and which target that was). A code's nearest target is then the
minimum of ``steps_up(code, x) + table[x]`` over the ancestors ``x`` of the code. On a tree
(ICD-10-CM is one) that equals the minimum of :func:`~phenoforge.eval.metrics.tree_distance`
over every pair; on a graph with several parents (Athena's 'Is a' DAG) it is the shortest path
through any shared ancestor, so the report and the drilldown can never disagree again.

Ties go to the target listed first, so the code a drilldown names is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from pydantic import BaseModel, PrivateAttr

from phenoforge.engine.codes import code_key

if TYPE_CHECKING:
    from phenoforge.engine.expansion import Hierarchy

_FAR = 1 << 30


class Nearest(NamedTuple):
    """The nearest target of one code: its concept id and the tree distance (None: no match)."""

    target: int | None
    distance: int | None


class NearestIndex:
    """Ancestor table of a set of target concepts, queried once per code to match."""

    def __init__(self, hierarchy: Hierarchy, target_ids: Sequence[int]) -> None:
        self.hierarchy = hierarchy
        self.targets = list(dict.fromkeys(target_ids))
        table: dict[int, tuple[int, int]] = {}  # ancestor -> (steps up from a target, target order)
        # on a tree a chain is the one path up: once an ancestor is as near to an earlier target, every
        # ancestor above it is too (and ties go to the earlier target), so the rest of the chain is skipped
        tree = hierarchy.is_tree
        for order, target in enumerate(self.targets):
            for ancestor, steps in zip(hierarchy.chain(target), hierarchy.chain_levels(target), strict=True):
                known = table.get(ancestor)
                if known is None or (steps, order) < known:
                    table[ancestor] = (steps, order)
                elif tree:
                    break
        self._table = table
        self._found: dict[int, Nearest] = {}
        """answers already given: the truth side is matched against every method's codes"""

    def __bool__(self) -> bool:
        return bool(self.targets)

    def nearest(self, concept_id: int | None) -> Nearest:
        """The nearest target of ``concept_id`` (None, an unknown code, matches nothing)."""
        if concept_id is None or not self._table:
            return Nearest(None, None)
        found = self._found.get(concept_id)
        if found is None:
            found = self._found[concept_id] = self._nearest(concept_id)
        return found

    def _nearest(self, concept_id: int) -> Nearest:
        best_distance, best_order = _FAR, _FAR
        hierarchy, table = self.hierarchy, self._table
        for ancestor, steps in zip(hierarchy.chain(concept_id), hierarchy.chain_levels(concept_id), strict=True):
            if steps > best_distance:
                break
            up = table.get(ancestor)
            if up is not None:
                distance = steps + up[0]
                if distance < best_distance or (distance == best_distance and up[1] < best_order):
                    best_distance, best_order = distance, up[1]
        if best_order == _FAR:
            return Nearest(None, None)
        return Nearest(self.targets[best_order], best_distance)


class CodeMatch(NamedTuple):
    """One code of one side and its nearest code on the other side.

    A named tuple, not a model: a benchmark makes ~300k of them (every predicted code of every run),
    from the vocabulary's own ``str``/``int`` values, and a model's construction cost 2-3 µs each.
    """

    code: str
    concept_id: int | None
    nearest_code: str | None = None
    distance: int | None = None


class CohortMatches(BaseModel):
    """Both directions of one cohort's matching: what every measure is computed from.

    ``truth`` holds the curated codes the vocabulary knows (normalised, de-duplicated);
    ``unresolvable_truth`` the ones it does not. ``predicted`` keeps unknown predicted codes
    (they match nothing, so they count against precision).
    """

    truth: list[CodeMatch]
    predicted: list[CodeMatch]
    unresolvable_truth: list[str]
    _credits: dict[tuple[str, int], list[float]] = PrivateAttr(default_factory=dict)
    """partial credits per (side, max_distance), computed once for every measure that reads them"""

    @property
    def truth_codes(self) -> list[str]:
        return [match.code for match in self.truth]

    @property
    def predicted_codes(self) -> list[str]:
        return [match.code for match in self.predicted]


def normalise_codes(hierarchy: Hierarchy, codes: Sequence[str]) -> list[tuple[str, int | None]]:
    """Codes as the vocabulary spells them, de-duplicated in order; unknown ones kept as typed.

    ``E1121``, ``e11.21`` and ``E11.21`` are one code; an unknown code is compared by its key.
    """
    seen: set[object] = set()
    out: list[tuple[str, int | None]] = []
    direct = hierarchy.ids_by_display_code()  # what ``resolve`` answers first, without a call per code
    for raw in codes:
        concept_id = direct.get(raw) if type(raw) is str else None
        if concept_id is None:
            concept_id = hierarchy.resolve(raw)
        if concept_id is not None:
            identity: object = concept_id
            code = hierarchy.code[concept_id]
        else:
            code = str(raw).strip()
            identity = ("unknown", code_key(code) or code)
        if identity in seen or not code:
            continue
        seen.add(identity)
        out.append((code, concept_id))
    return out


def match_cohort(
    hierarchy: Hierarchy,
    truth_codes: Sequence[str],
    predicted_codes: Sequence[str],
    truth_index: NearestIndex | None = None,
) -> CohortMatches:
    """Nearest matches in both directions (``truth_index`` may be passed in when reused)."""
    truth_all = normalise_codes(hierarchy, truth_codes)
    truth = [(code, cid) for code, cid in truth_all if cid is not None]
    unresolvable = [code for code, cid in truth_all if cid is None]
    predicted = normalise_codes(hierarchy, predicted_codes)
    if truth_index is None:
        truth_index = NearestIndex(hierarchy, [cid for _, cid in truth if cid is not None])
    predicted_index = NearestIndex(hierarchy, [cid for _, cid in predicted if cid is not None])

    names = hierarchy.code

    def side(codes: Sequence[tuple[str, int | None]], index: NearestIndex) -> list[CodeMatch]:
        rows = []
        for code, cid in codes:
            target, distance = index.nearest(cid)
            rows.append(CodeMatch(code, cid, names[target] if target is not None else None, distance))
        return rows

    # lists of the vocabulary's own str/int/None values: constructed without validating them again
    return CohortMatches.model_construct(
        truth=side(truth, predicted_index), predicted=side(predicted, truth_index), unresolvable_truth=unresolvable
    )

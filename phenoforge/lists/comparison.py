"""Two code lists compared as a reader expects: the same list scores 1.000, and scores against a side with no
code the vocabulary knows are undefined, not 0 or 1.

:func:`phenoforge.eval.compare.compare_lists` scores the second list as a benchmark scores a method: a code of
the reference that the vocabulary does not know is left out, one of the answer counts as a miss. Compared with
itself, a list holding one unknown code would then score below 1. Here a code unknown to the vocabulary that
both lists hold (the same code, spelt alike up to case and dots) is a shared code: it is taken out of the
answer before scoring and listed in ``unknown_shared``; an unknown code of one side only is scored as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from phenoforge.engine.codes import code_key
from phenoforge.eval.compare import ListComparison, compare_lists
from phenoforge.eval.metrics import DEFAULT_MAX_DISTANCE

if TYPE_CHECKING:
    from phenoforge.engine.expansion import Hierarchy

SHOWN = 20
"""How many codes a message or a line names before it gives the count of the rest."""


class CodeListComparison(ListComparison):
    """A comparison whose scores may be undefined (a side without a known code); see the module docstring."""

    unknown_shared: list[str] = Field(default_factory=list, description="unknown codes both lists hold")
    undefined: str = Field(default="", description="why the scores are undefined ('' when they are defined)")

    @property
    def n_first(self) -> int:
        """Codes of the first list the comparison counts (known ones and unknown ones both hold)."""
        return len(self.shared) + len(self.only_first) + len(self.unknown_shared)

    @property
    def n_second(self) -> int:
        return len(self.shared) + len(self.only_second) + len(self.unknown_shared)

    def score_text(self, value: float) -> str:
        return "undefined" if self.undefined else f"{value:.3f}"


def _key(code: str) -> str:
    text = str(code).strip()
    return code_key(text) or text.upper()


def compare_code_lists(
    hierarchy: Hierarchy,
    first: Sequence[str],
    second: Sequence[str],
    first_name: str = "first",
    second_name: str = "second",
    max_distance: int = DEFAULT_MAX_DISTANCE,
) -> CodeListComparison:
    """``second`` scored with ``first`` as ground truth, symmetric on identical input (module docstring)."""

    known: dict[str, bool] = {}

    def unknown(code: str) -> bool:
        found = known.get(code)
        if found is None:
            found = known[code] = hierarchy.resolve(code) is not None
        return not found

    first_unknown = {_key(code) for code in first if unknown(code)}
    both = {_key(code) for code in second if unknown(code)} & first_unknown
    answer = [code for code in second if not (unknown(code) and _key(code) in both)]
    base = compare_lists(hierarchy, first, answer, first_name, second_name, max_distance)
    shared_unknown = list(dict.fromkeys(str(code).strip() for code in first if unknown(code) and _key(code) in both))
    out = CodeListComparison(**base.model_dump(), unknown_shared=shared_unknown)
    out.unknown = sorted({*base.unknown, *shared_unknown})
    known_first = len(base.shared) + len(base.only_first)
    known_second = len(base.shared) + len(base.only_second)
    if not known_first or not known_second:
        empty = [name for name, n in ((first_name, known_first), (second_name, known_second)) if not n]
        out.undefined = (
            f"{' and '.join(empty)} {'holds' if len(empty) == 1 else 'hold'} no code this vocabulary knows: "
            "a score against an empty side is undefined"
        )
        out.coverage = out.over_inclusion = out.hierarchical = out.exact_f1 = float("nan")
    return out


def named(codes: Sequence[str], shown: int = SHOWN) -> str:
    """The first ``shown`` codes, then how many more: a line that stays a line for a million codes."""
    head = ", ".join(str(code) for code in codes[:shown])
    rest = len(codes) - shown
    return head + (f" ... and {rest:,} more" if rest > 0 else "")

"""Self-describing measures: one module per measure, looked up by name.

>>> measure("hierarchical").label
'Hierarchical score'
>>> [m.key for m in parse_measures(["coverage", "hierarchical(max_distance=4)"])]
['coverage', 'hierarchical(max_distance=4)']
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from phenoforge.eval.measures.base import Measure, MeasureInfo, PartialCreditMeasure
from phenoforge.eval.measures.coverage import Coverage
from phenoforge.eval.measures.exact import ExactF1, ExactPrecision, ExactRecall
from phenoforge.eval.measures.hierarchical import Hierarchical
from phenoforge.eval.measures.over_inclusion import OverInclusion
from phenoforge.eval.measures.precision import Precision

MEASURE_TYPES: dict[str, type[Measure]] = {
    cls.name: cls for cls in (Hierarchical, Coverage, OverInclusion, Precision, ExactPrecision, ExactRecall, ExactF1)
}
DEFAULT_MEASURES: tuple[Measure, ...] = tuple(cls() for cls in MEASURE_TYPES.values())
"""Every measure at its default parameters: what a report carries unless asked otherwise."""

_SPEC = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(?:\((.*)\))?\s*$")


def measure(spec: str | Measure) -> Measure:
    """A measure from its key (``hierarchical`` or ``hierarchical(max_distance=4)``)."""
    if isinstance(spec, Measure):
        return spec
    match = _SPEC.match(spec)
    if match is None or match.group(1) not in MEASURE_TYPES:
        raise ValueError(f"unknown measure {spec!r}; choose from {', '.join(MEASURE_TYPES)}")
    parameters: dict[str, int | float] = {}
    for part in filter(None, (p.strip() for p in (match.group(2) or "").split(","))):
        name, _, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"measure parameter {part!r} is not name=number") from None
        parameters[name.strip()] = int(number) if number.is_integer() else number
    return MEASURE_TYPES[match.group(1)](**parameters)


def parse_measures(specs: Iterable[str | Measure] | None) -> list[Measure]:
    """Measures from keys, de-duplicated in order; every default measure when None."""
    if specs is None:
        return list(DEFAULT_MEASURES)
    return list(dict.fromkeys(measure(spec) for spec in specs))


def default_info(name: str) -> MeasureInfo:
    """Label and direction of a measure by key (what the dashboard and CLI display)."""
    return measure(name).info()


__all__ = [
    "DEFAULT_MEASURES",
    "MEASURE_TYPES",
    "Coverage",
    "ExactF1",
    "ExactPrecision",
    "ExactRecall",
    "Hierarchical",
    "Measure",
    "MeasureInfo",
    "OverInclusion",
    "PartialCreditMeasure",
    "Precision",
    "default_info",
    "measure",
    "parse_measures",
]

"""What a measure is: a self-describing, parameterised function of one cohort's matches.

Modelled on ir_measures: a measure knows its name, label, direction and parameters, so a saved
report says exactly how it was scored, and the dashboard and CLI read labels and directions
from here and nowhere else.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from pydantic import BaseModel

from phenoforge.eval.matching import CohortMatches
from phenoforge.eval.metrics import DEFAULT_MAX_DISTANCE, distance_weighted_score
from phenoforge.eval.models import CohortEvalResult


class MeasureInfo(BaseModel):
    """A measure as a report records it."""

    name: str
    label: str
    higher_is_better: bool
    parameters: dict[str, int | float] = {}
    description: str = ""


class Measure(ABC):
    """One measure; subclasses set the class attributes and ``compute``."""

    name: ClassVar[str]
    label: ClassVar[str]
    higher_is_better: ClassVar[bool] = True
    description: ClassVar[str] = ""
    result_field: ClassVar[str | None] = None
    """The ``CohortEvalResult`` field that holds this measure at its default parameters."""
    defaults: ClassVar[dict[str, int | float]] = {}

    def __init__(self, **parameters: int | float) -> None:
        unknown = set(parameters) - set(self.defaults)
        if unknown:
            raise ValueError(f"{self.name} takes {sorted(self.defaults) or 'no parameters'}, not {sorted(unknown)}")
        self.parameters = {**self.defaults, **parameters}

    @property
    def key(self) -> str:
        """``name`` at default parameters, else ``name(param=value)``: the key scores are stored under."""
        changed = {k: v for k, v in self.parameters.items() if self.defaults.get(k) != v}
        if not changed:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in sorted(changed.items()))})"

    def info(self) -> MeasureInfo:
        return MeasureInfo(
            name=self.key,
            label=self.label,
            higher_is_better=self.higher_is_better,
            parameters=dict(self.parameters),
            description=self.description,
        )

    @abstractmethod
    def compute(self, matches: CohortMatches) -> float: ...

    def value(self, result: CohortEvalResult) -> float:
        """This measure's value in a scored result (reports saved before ``scores`` existed included)."""
        if self.key in result.scores:
            return float(result.scores[self.key])
        if self.result_field is not None and self.key == self.name:
            return float(getattr(result, self.result_field))
        raise KeyError(f"the result was not scored with {self.key!r}")

    def __repr__(self) -> str:
        return self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Measure) and (type(self), self.parameters) == (type(other), other.parameters)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(self.parameters.items()))))


class PartialCreditMeasure(Measure, ABC):
    """A measure built on distance-weighted partial credit (``max_distance`` edges to zero)."""

    defaults: ClassVar[dict[str, int | float]] = {"max_distance": DEFAULT_MAX_DISTANCE}

    def credits(self, side: str, matches: CohortMatches) -> list[float]:
        max_distance = int(self.parameters["max_distance"])
        cached = matches._credits.get((side, max_distance))
        if cached is None:
            rows = matches.truth if side == "truth" else matches.predicted
            cached = [distance_weighted_score(row.distance, max_distance) for row in rows]
            matches._credits[(side, max_distance)] = cached
        return list(cached)

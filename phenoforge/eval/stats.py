"""Which benchmark differences are real: paired tests over cohorts, Holm correction, bootstrap CIs.

Cohorts are the unit of replication: two methods are scored on the same cohorts, so the test is
paired. A sign-flip permutation test on the per-cohort differences makes no distributional
assumption (scores are bounded, skewed and often tied), is exact for small cohort counts, and
says honestly when there are too few cohorts for any difference to reach significance.
Pure: numpy and pydantic only, no database, so property tests run it cheaply.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, Field

EXACT_LIMIT = 16
"""Up to this many non-zero differences the permutation test enumerates all 2**n sign flips."""


class PairedTestResult(BaseModel):
    """A two-sided paired sign-flip permutation test of mean(b - a) = 0."""

    n: int = Field(description="paired observations (cohorts scored by both methods)")
    n_nonzero: int = Field(description="pairs whose difference is not zero")
    mean_diff: float = Field(description="mean of b - a")
    p_value: float
    exact: bool = Field(description="all sign flips enumerated (else Monte Carlo)")
    min_p_value: float = Field(description="smallest p-value this many pairs can possibly give")


class MethodComparison(BaseModel):
    """One method against a baseline (or one pair of methods) over their shared cohorts."""

    method_a: str
    method_b: str
    n_cohorts: int
    mean_a: float
    mean_b: float
    mean_diff: float = Field(description="mean of b - a over shared cohorts")
    p_value: float
    p_holm: float = Field(description="Holm-adjusted p-value across the family of comparisons")
    significant: bool = Field(description="p_holm < alpha")
    note: str | None = Field(default=None, description="why no difference can be called, if so")


class ConfidenceInterval(BaseModel):
    mean: float
    low: float
    high: float
    n: int
    confidence: float


def _diffs(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    return np.asarray(b, dtype=float) - np.asarray(a, dtype=float)


def paired_permutation_test(
    a: Sequence[float], b: Sequence[float], n_resamples: int = 20000, seed: int = 0
) -> PairedTestResult:
    """Two-sided sign-flip test on ``b - a``; exact up to ``EXACT_LIMIT`` non-zero pairs.

    Zero differences carry no sign information and are dropped (as in the sign test). The
    p-value counts flips whose |mean| is at least the observed one, the observed included, so it
    is never zero and never below ``min_p_value = 2 / 2**n_nonzero``.
    """
    diffs = _diffs(a, b)
    n = int(diffs.size)
    mean_diff = float(diffs.mean()) if n else 0.0
    nonzero = diffs[np.abs(diffs) > 1e-12]
    m = int(nonzero.size)
    if m == 0:
        return PairedTestResult(n=n, n_nonzero=0, mean_diff=mean_diff, p_value=1.0, exact=True, min_p_value=1.0)
    min_p = min(1.0, 2.0 / 2.0**m)
    observed = abs(float(nonzero.sum()))
    tolerance = 1e-9 * max(1.0, observed)
    if m <= EXACT_LIMIT:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m)))
        sums = np.abs(signs @ nonzero)
        p_value = float(np.count_nonzero(sums >= observed - tolerance)) / float(len(sums))
        exact = True
    else:
        rng = np.random.default_rng(seed)
        signs = rng.choice((1.0, -1.0), size=(n_resamples, m))
        sums = np.abs(signs @ nonzero)
        hits = int(np.count_nonzero(sums >= observed - tolerance))
        p_value = (hits + 1) / (n_resamples + 1)
        exact = False
    return PairedTestResult(
        n=n,
        n_nonzero=m,
        mean_diff=mean_diff,
        p_value=min(1.0, max(p_value, min_p)),
        exact=exact,
        min_p_value=min_p,
    )


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order (monotone, capped at 1)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[index])))
        adjusted[index] = running
    return adjusted


def bootstrap_ci(
    values: Sequence[float], confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> ConfidenceInterval:
    """Percentile bootstrap interval for the mean (resampling cohorts with replacement)."""
    data = np.asarray(values, dtype=float)
    n = int(data.size)
    if n == 0:
        return ConfidenceInterval(mean=math.nan, low=math.nan, high=math.nan, n=0, confidence=confidence)
    mean = float(data.mean())
    if n == 1 or np.all(data == data[0]):
        return ConfidenceInterval(mean=mean, low=mean, high=mean, n=n, confidence=confidence)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, n, size=(n_resamples, n))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    # Floating-point means of resamples may stray a hair outside [min, max]; clamp for honesty.
    low = max(float(low), float(data.min()))
    high = min(float(high), float(data.max()))
    return ConfidenceInterval(mean=mean, low=min(low, mean), high=max(high, mean), n=n, confidence=confidence)


def compare_methods(
    scores: Mapping[str, Mapping[str, float]],
    baseline: str | None = None,
    alpha: float = 0.05,
    n_resamples: int = 20000,
    seed: int = 0,
) -> list[MethodComparison]:
    """Paired tests per method pair over shared cohorts, Holm-corrected as one family.

    ``scores[method][cohort_id]`` is one score per cohort. With a ``baseline`` every other method
    is compared with it; without one, every pair. A comparison whose cohorts are too few for
    even the most extreme outcome to reach ``alpha`` after correction says so in ``note``.
    """
    methods = list(scores)
    if baseline is not None:
        if baseline not in scores:
            raise ValueError(f"baseline {baseline!r} is not among the methods {methods}")
        pairs = [(baseline, method) for method in methods if method != baseline]
    else:
        pairs = list(itertools.combinations(methods, 2))
    raw: list[tuple[str, str, list[str], PairedTestResult]] = []
    for method_a, method_b in pairs:
        shared = sorted(set(scores[method_a]) & set(scores[method_b]))
        a = [float(scores[method_a][cohort]) for cohort in shared]
        b = [float(scores[method_b][cohort]) for cohort in shared]
        raw.append((method_a, method_b, shared, paired_permutation_test(a, b, n_resamples=n_resamples, seed=seed)))
    adjusted = holm_adjust([test.p_value for *_rest, test in raw])
    family = len(raw)
    comparisons: list[MethodComparison] = []
    for (method_a, method_b, shared, test), p_holm in zip(raw, adjusted, strict=True):
        note = None
        if not shared:
            note = "no cohort was scored by both methods"
        elif test.n_nonzero == 0:
            note = "the two methods score identically on every shared cohort"
        elif test.min_p_value * family >= alpha:
            note = (
                f"too few cohorts to tell: with {test.n_nonzero} differing cohorts the smallest "
                f"possible p-value is {test.min_p_value:.3g} (x{family} comparisons), not below "
                f"{alpha}"
            )
        mean_a = float(np.mean([scores[method_a][c] for c in shared])) if shared else math.nan
        mean_b = float(np.mean([scores[method_b][c] for c in shared])) if shared else math.nan
        comparisons.append(
            MethodComparison(
                method_a=method_a,
                method_b=method_b,
                n_cohorts=len(shared),
                mean_a=mean_a,
                mean_b=mean_b,
                mean_diff=test.mean_diff,
                p_value=test.p_value,
                p_holm=p_holm,
                significant=bool(shared) and p_holm < alpha,
                note=note,
            )
        )
    return comparisons

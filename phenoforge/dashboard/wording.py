"""Numbers in words for the dashboard: signs and directions spelled out, 3 decimals, no 0.0000."""

from __future__ import annotations


def p_text(p: float) -> str:
    """A p-value as a reader takes it: never 0.0000."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def direction_text(diff: float, higher: str = "higher", lower: str = "lower") -> str:
    """A signed difference in words ("0.315 higher"), so no reader has to decode a minus sign."""
    if round(diff, 3) == 0:
        return "the same (to 3 decimals)"
    return f"{abs(diff):.3f} {higher if diff > 0 else lower}"


def delta_text(diff: float, versus: str = "") -> str | None:
    """A metric's delta to 3 decimals, or None when it rounds to zero: no red 'up +0.0000'."""
    if round(diff, 3) == 0:
        return None
    return f"{diff:+.3f}" + (f" {versus}" if versus else "")

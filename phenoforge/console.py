"""What every command-line group shares: a progress bar, argument types, messages (a leaf: no command here).

Kept apart from :mod:`phenoforge.cli` so the groups that live in lower packages (Athena's, the scale library's)
reach these helpers without importing the command-line package that wires them in.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from phenoforge.config import ProgressCallback


@contextlib.contextmanager
def progress_bar(enabled: bool = True) -> Iterator[ProgressCallback]:
    """A tqdm bar on stderr driven by ``progress(done, total, message)`` calls."""
    from tqdm import tqdm

    bar: dict[str, tqdm] = {}

    def update(done: int, total: int, message: str) -> None:
        if not enabled:
            return
        current = bar.get("bar")
        # a new bar per stage: a stage starts at done == 0 or changes its total
        if current is None or done == 0 or current.total != total:
            if current is not None:
                current.close()
            current = bar["bar"] = tqdm(total=total, desc=message, file=sys.stderr, leave=False)
        current.set_description(message, refresh=False)
        current.n = done
        current.refresh()

    try:
        yield update
    finally:
        if "bar" in bar:
            bar["bar"].close()


def positive_int(name: str) -> Callable[[str], int]:
    """An argparse type whose error names the option: "k must be a positive integer, got 'abc'"."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got {text!r}")
        return value

    return parse


def dense_unavailable_message(status: Any, consequence: str = "dense methods are skipped") -> str:
    """Why the dense index cannot be used, in its own words (not built, stale, corrupt), and how to rebuild."""
    if status.state in ("corrupt", "stale"):
        return (
            f"the dense index is {status.state} ({status.reason}); {consequence}: "
            "rebuild it with `python -m phenoforge build`"
        )
    return f"the dense index is not built; {consequence} (build it with `python -m phenoforge build`)"

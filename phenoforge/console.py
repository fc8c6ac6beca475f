"""What every command-line group shares: a progress bar, argument types, messages (a leaf: no command here).

Kept apart from :mod:`phenoforge.cli` so the groups that live in lower packages (Athena's, the scale library's)
reach these helpers without importing the command-line package that wires them in.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import unicodedata
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


# --- what a person types: one rule for every field ---------------------------------------------------------

_LINE_BREAKS = frozenset("\n\r")
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


class TypedTextError(ValueError):
    """Text a person typed holds a character no field takes (the message names the field and the code point)."""


def _not_text(ch: str) -> bool:
    """A control character (C0, DEL, C1), a bidi override or a lone surrogate (an undecodable byte)."""
    category = unicodedata.category(ch)
    return category in ("Cc", "Cs") or ch in _BIDI_CONTROLS


def typed_text_problem(text: str, field: str, multiline: bool = False) -> str | None:
    """Why ``text`` cannot be stored as ``field``; None when it can.

    Refused: C0 and C1 control characters and DEL (an escape sequence echoed to a terminal runs there), bidi
    overrides (they reorder what is read), and bytes that were not text in the terminal's encoding (Python
    carries them as lone surrogates). A tab is fine; a line break only in a field of several lines."""
    for position, ch in enumerate(text, start=1):
        if ch == "\t" or (multiline and ch in _LINE_BREAKS):
            continue
        if unicodedata.category(ch) == "Cs":
            return (
                f"the {field} holds a byte that is not text in your terminal's encoding (at character {position}); "
                "type it as UTF-8 text"
            )
        if _not_text(ch):
            kind = "a line break" if ch in _LINE_BREAKS else "a control character"
            return f"the {field} holds {kind} (U+{ord(ch):04X} at character {position}); type plain text on " + (
                "several lines if you like" if multiline else "one line"
            )
    return None


def check_typed_text(text: str, field: str, multiline: bool = False) -> str:
    """``text`` unchanged when it can be stored as ``field``; a ``TypedTextError`` (one line, never echoing the
    text) when it cannot."""
    problem = typed_text_problem(text, field, multiline)
    if problem is not None:
        raise TypedTextError(problem)
    return text


def printable(text: object) -> str:
    """Stored text as it is safe to print, whatever it holds: control characters, bidi overrides and lone
    surrogates shown as escapes (``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\udcff``); everything else as it is."""
    return "".join(_escape(ch) if _not_text(ch) else ch for ch in str(text))


def _escape(ch: str) -> str:
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"

"""CSV that a spreadsheet opens as data, never as formulas: every CSV the project writes goes through here.

A cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read as a formula
by Excel, LibreOffice and Google Sheets, so a reviewer name or description such as
``=HYPERLINK(...)`` would run when the export is opened. As OWASP's CSV injection guidance advises,
such a cell is prefixed with a single quote, which spreadsheets show as text and do not evaluate.
A plain number (``-0.25``) is left alone: it is data, and prefixing it would turn it into text.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


def safe_cell(value: Any) -> Any:
    """``value`` with a leading quote when a spreadsheet would read it as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.match(value):
        return "'" + value
    return value


def unescaped_cell(value: str) -> str:
    """A cell read back: the quote :func:`safe_cell` put before a formula-like value taken off again."""
    if value.startswith("'") and value[1:].startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.match(value[1:]):
        return value[1:]
    return value


class SafeWriter:
    """``csv.writer`` whose every cell passes through :func:`safe_cell`.

    A row with a carriage return in a cell is written fully quoted: the csv module leaves such a
    cell bare under a ``\n`` line terminator, and a reader would split the row there.
    """

    def __init__(self, out: TextIO, **options: Any) -> None:
        self._writer = csv.writer(out, **options)
        self._quoting_writer = csv.writer(out, **{**options, "quoting": csv.QUOTE_ALL})

    def writerow(self, row: Iterable[Any]) -> None:
        cells = [safe_cell(value) for value in row]
        writer = self._quoting_writer if any(isinstance(cell, str) and "\r" in cell for cell in cells) else self._writer
        writer.writerow(cells)

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


class SafeDictWriter:
    """``csv.DictWriter`` whose every cell passes through :func:`safe_cell` (the header is ours)."""

    def __init__(self, out: TextIO, fieldnames: list[str], **options: Any) -> None:
        self._fieldnames = list(fieldnames)
        self._writer = SafeWriter(out, **options)

    def writeheader(self) -> None:
        self._writer.writerow(self._fieldnames)

    def writerow(self, row: Mapping[str, Any]) -> None:
        self._writer.writerow([row.get(name, "") for name in self._fieldnames])

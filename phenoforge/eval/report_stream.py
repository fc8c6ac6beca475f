"""Benchmark reports written as they are scored, never held whole.

``benchmark --json`` prints ``{library_id: report, ...}`` as one JSON document. A 2,000-cohort library
x 8 methods makes ~100 MB of it: built as one string (with its ``model_dump`` and an indented copy) it
held several times that in memory at the end of the run. :class:`JsonReportWriter` writes the same
document, byte for byte, while the run goes: each chunk's results as they are scored (``results`` is
the report's first field), then the rest of the report once the library is done.

A run stopped halfway leaves the document unterminated, which no JSON reader accepts: never a
complete-looking report with results missing. Saved runs (``app_state``) are stored line by line
instead and say themselves whether they finished.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TextIO

from phenoforge.eval.models import BenchmarkReport, CohortEvalResult

_INDENT = 1
"""``json.dumps(..., indent=1)``: what ``benchmark --json`` has always printed."""


def _nested(text: str, depth: int) -> str:
    """``text`` (an indented dump) as it reads ``depth`` levels down an indented document."""
    return text.replace("\n", "\n" + " " * (_INDENT * depth))


class JsonReportWriter:
    """Writes ``json.dumps({library_id: report.model_dump(), ...}, indent=1)`` to ``out`` piecewise:
    ``begin(library_id)``, ``add(results)`` any number of times, ``end(report)`` with the report's other
    fields (its ``results`` are ignored: they were added), and ``close()`` after the last library."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._libraries = 0
        self._results = 0
        self._open = False

    def begin(self, library_id: str) -> None:
        if self._open:
            raise ValueError("the previous library's report is not ended")
        self.out.write("{\n" if self._libraries == 0 else ",\n")
        self.out.write(" " * _INDENT + json.dumps(library_id) + ": {\n" + " " * (2 * _INDENT) + '"results": [')
        self._libraries += 1
        self._results = 0
        self._open = True

    def add(self, results: Sequence[CohortEvalResult]) -> None:
        if not self._open:
            raise ValueError("add() before begin()")
        pad = " " * (3 * _INDENT)
        for result in results:
            text = json.dumps(result.model_dump(), indent=_INDENT)
            self.out.write(("\n" if self._results == 0 else ",\n") + pad + _nested(text, 3))
            self._results += 1

    def end(self, report: BenchmarkReport) -> None:
        """The report's fields after ``results``, closing this library's entry."""
        if not self._open:
            raise ValueError("end() before begin()")
        rest = report.model_dump(exclude={"results"})
        if self._results:
            self.out.write("\n" + " " * (2 * _INDENT) + "]")
        else:
            self.out.write("]")
        body = json.dumps(rest, indent=_INDENT)  # "{\n <fields>\n}"
        fields = body[1:-1].rstrip("\n")  # "\n <fields>"
        if fields.strip():
            self.out.write("," + _nested(fields, 1))
        self.out.write("\n" + " " * _INDENT + "}")
        self._open = False

    def close(self) -> None:
        if self._open:
            raise ValueError("the last library's report is not ended")
        self.out.write("\n}\n" if self._libraries else "{}\n")

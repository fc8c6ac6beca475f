"""What the command groups of :mod:`phenoforge.cli` share: the database, the dense index, argument types."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from phenoforge.config import ProgressCallback
from phenoforge.console import dense_unavailable_message
from phenoforge.errors import PhenoforgeError


def _connect():  # noqa: ANN202 - a DuckDB connection
    from phenoforge.engine.db import connect

    return connect()


def _dense_or_none(  # noqa: ANN202
    con,  # noqa: ANN001
    wanted: bool,
    build: bool = False,
    progress: ProgressCallback | None = None,
    precision_note: bool = True,
):
    """The dense retriever when its index is ready (or built on request); None otherwise. A ready index
    embedded in bf16 or int8 gets a note on stderr (``precision_note``: unless the caller printed it)."""
    if not wanted:
        return None
    from phenoforge.engine import dense as dense_module

    if build:
        return dense_module.ensure_dense_index(con, progress=progress)
    retriever = dense_module.load_dense_if_ready(con)
    if retriever is None:
        print(f"note: {dense_unavailable_message(dense_module.dense_index_status(con))}", file=sys.stderr)
    elif precision_note and (note := retriever.status.precision_note()) is not None:
        print(f"note: {note}", file=sys.stderr)  # a bf16 index is used as it is: say so
    return retriever


def _dense_problem(con) -> str:  # noqa: ANN001 - a DuckDB connection
    """Why the dense index cannot be used, as the report records it: 'corrupt (checksum ...)', 'missing'."""
    from phenoforge.engine.dense import dense_index_status

    status = dense_index_status(con)
    return f"{status.state} ({status.reason}); rebuild: {status.rebuild_command}" if status.reason else status.state


def _weights(text: str) -> list[float]:
    try:
        weights = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("weights are comma-separated numbers, e.g. 0,0.25,0.5") from None
    if any(not 0.0 <= weight <= 1.0 for weight in weights):
        raise argparse.ArgumentTypeError("every weight must be between 0 and 1")
    from phenoforge.eval.selection import weights_problem

    problem = weights_problem(weights)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return weights


def _unit_interval(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError("a number of seconds, 0 or more")
    return value


def write_or_print(text: str, output: str | None, wrote: str) -> None:
    """``text`` into the file ``output`` and ``wrote`` said on stdout, or ``text`` on stdout without one; a file
    that cannot be written is one line, not a traceback."""
    if not output:
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as error:
        raise PhenoforgeError(f"cannot write {output} ({error.strerror or error})") from None
    print(wrote)

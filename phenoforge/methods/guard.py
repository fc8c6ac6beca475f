"""Calling a plug-in's code so that its failure costs only its own answer.

A plug-in (``module:function``, an entry point, a Method given to the API) may raise anything,
``SystemExit`` included, answer with the wrong type, or never return. The harness calls it through
:func:`guarded`, so each of these becomes a :class:`MethodFailed` reported for that method and
cohort, and the run goes on. Built-ins are called directly, with no time limit: their errors are
bugs, and propagate.
"""

from __future__ import annotations

import contextvars
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

from phenoforge.config import DEFAULT_PLUGIN_TIMEOUT
from phenoforge.eval.runs import RunEntry

__all__ = ["DEFAULT_PLUGIN_TIMEOUT", "MethodFailed", "MethodTimedOut", "checked_answer", "guarded"]
T = TypeVar("T")
MAX_ANSWER_CODES = 200_000
"""More codes than ICD-10-CM has (about 98,000 with its categories): an answer this long is a runaway
generator, stopped before it fills memory."""


class MethodFailed(Exception):
    """A plug-in call that raised, answered with the wrong type, or ran past its time limit (the reason)."""


class MethodTimedOut(MethodFailed):
    """A plug-in call the harness stopped waiting for."""


def describe(error: BaseException) -> str:
    """``Type: message`` of a plug-in's exception, even one whose ``__str__`` raises."""
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:  # noqa: BLE001 - a plug-in's exception may not even print
        return f"{type(error).__name__} (its message cannot be printed)"


def guarded(
    function: Callable[[], T],
    timeout: float | None,
    what: str = "the method",
    passes: tuple[type[BaseException], ...] = (),
) -> T:
    """``function()``, any failure of it raised as :class:`MethodFailed` (``what raised X: ...``).

    ``passes`` (``SkipMethod`` for a setup saying it cannot run here) and ``KeyboardInterrupt`` (the
    user stopping the run) propagate; ``SystemExit`` and every other exception are the method's failure. With a
    ``timeout`` the call runs in a daemon worker thread and the caller waits at most that long. Python
    cannot stop a thread: a call past its limit is abandoned, not killed. It keeps running, and keeps
    what it holds, until it returns by itself or the process exits; its answer is then discarded.
    """
    if timeout is None:
        try:
            return function()
        except BaseException as error:  # noqa: BLE001 - SystemExit from a plug-in is its failure, not ours
            raise _failure(error, what, passes) from None
    outcome: list[tuple[bool, object]] = []
    context = contextvars.copy_context()  # the caller's context variables hold in the worker (a refusal to fit)

    def work() -> None:
        try:
            outcome.append((True, context.run(function)))
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread, which decides
            outcome.append((False, error))

    worker = threading.Thread(target=work, name=f"phenoforge plug-in: {what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive() or not outcome:
        raise MethodTimedOut(f"no answer within {timeout:g} s (abandoned, still running)")
    done, value = outcome[0]
    if done:
        return value  # type: ignore[return-value]  # function()'s own result
    raise _failure(value, what, passes)  # type: ignore[arg-type]  # what work() caught


def _failure(error: BaseException, what: str, passes: tuple[type[BaseException], ...]) -> BaseException:
    """What to raise for ``error``: itself when it must propagate, else a MethodFailed naming it."""
    if isinstance(error, (KeyboardInterrupt, MethodFailed, *passes)):
        return error
    return MethodFailed(f"{what} raised {describe(error)}")


def checked_answer(produced: object, provenance: str) -> list[RunEntry]:
    """A plug-in's answer for one cohort as run entries, or MethodFailed saying what is wrong with it.

    A list, tuple or iterator of codes (``str``) or :class:`RunEntry`, at most :data:`MAX_ANSWER_CODES`;
    a bare string would otherwise be scored character by character, a dict by its keys, a set in no order.
    """
    if isinstance(produced, str | bytes | Mapping) or not isinstance(produced, Sequence | Iterator):
        raise MethodFailed(f"answered {type(produced).__name__}, not a list of codes")
    out: list[RunEntry] = []
    for rank, item in enumerate(produced, start=1):
        if rank > MAX_ANSWER_CODES:
            raise MethodFailed(f"answered more than {MAX_ANSWER_CODES} codes")
        if isinstance(item, str):
            out.append(RunEntry(code=item, rank=rank, provenance=[provenance]))
        elif isinstance(item, RunEntry) and isinstance(item.code, str):
            if item.score is not None and not (isinstance(item.score, float | int) and math.isfinite(item.score)):
                raise MethodFailed(f"item {rank} has a score that is not a finite number ({item.score})")
            out.append(item.model_copy(update={"provenance": list(item.provenance)}))
        else:
            raise MethodFailed(f"item {rank} is {type(item).__name__}, not a code or RunEntry")
    return out

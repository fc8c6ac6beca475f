"""The first-run build's last step: fitting the set builders in the background, once for every session.

Home shows it beside the vocabulary, the libraries and the dense index; the pages never fit (they run under
:func:`~phenoforge.setbuild.api.fits_refused`) and offer the set-building methods once every fit is stored.

One :class:`SetBuilderFits` per process (the page layer keeps it in ``st.cache_resource``) fits every fit the
installed libraries need (:func:`~phenoforge.methods.set_building.installed_fit_keys`: one per library group
held out, one on everything) in a thread, after the dense index is ready (or at once when no dense index is
coming). Across processes one fitter holds ``data/models/.first-run-fits.lock`` and writes its progress to
``.first-run-fits.json``; another process waits on the lock showing that progress, then finds every fit stored.
A fit killed halfway leaves no bundle (each is written whole, by rename, after its models): the next run fits
it again, reusing the models and parameters that were already written.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import duckdb
from pydantic import BaseModel, ValidationError

from phenoforge.engine.curated import Library, list_libraries
from phenoforge.errors import PhenoforgeError
from phenoforge.locks import file_lock_polled
from phenoforge.storage import is_disk_full, process_alive, write_atomically

LOCK_NAME = ".first-run-fits.lock"
PROGRESS_NAME = ".first-run-fits.json"
RECHECK_SECONDS = 5.0
"""How often fits found missing are looked for again (another process may have fitted them)."""
READY_RECHECK_SECONDS = 60.0
"""How often fits found stored are looked at again while no library manifest changed (a look reads every cohort
file: about 0.2 s on the bundled libraries, too much for every page run)."""
PROGRESS_WRITE_SECONDS = 0.5
"""How often the fitter writes its progress file for other processes."""
DENSE_POLL_SECONDS = 1.0
"""How often a fitting that waits for the dense index looks at it again."""


class DenseSource(Protocol):
    """What the fits need of the dense index manager (:class:`~phenoforge.dashboard.resources.DenseManager`)."""

    def status(self) -> Any: ...

    def retriever(self) -> Any: ...


class Fit(Protocol):
    """``fit_builders``' shape: fit (or reuse) one held-out key's builders."""

    def __call__(
        self,
        con: duckdb.DuckDBPyConnection,
        dense: object | None,
        held_out_group: str | None,
        libraries: Sequence[Library],
        progress: Callable[[int, int, str], None],
        also_held_out: Sequence[str] = (),
    ) -> object: ...


class FitState(BaseModel):
    """What Home and the pages say about the set builders right now."""

    state: str  # "waiting" (for the dense index) | "missing" | "fitting" | "ready" | "failed"
    done: int = 0
    """fits finished"""
    total: int = 0
    """fits to make"""
    fraction: float = 0.0
    """of the whole fitting, counting the running fit's own steps"""
    step: str = ""
    """what runs now"""
    message: str = ""
    error: str | None = None
    seconds: float = 0.0
    """elapsed since the fitting started"""
    remaining: float | None = None
    """an estimate of the seconds left (None until there is enough progress to tell)"""
    elsewhere: bool = False
    """another process fits; this one waits for it"""

    @property
    def percent(self) -> int:
        return int(round(100 * self.fraction))

    def progress_text(self) -> str:
        """``2/4 fits · <step> · 12 s, about 30 s left``: what a progress bar says."""
        left = f", about {self.remaining:.0f} s left" if self.remaining is not None else ""
        where = " (in another phenoforge process; this one waits for it)" if self.elsewhere else ""
        counted = f"{self.done}/{self.total} fits · " if self.total else ""
        return f"{counted}{self.step or 'starting'}{where} · {self.seconds:.0f} s{left}"


class _Progress(BaseModel):
    """The progress file another process reads while this one fits."""

    pid: int
    started: float
    """wall-clock time the fitting started"""
    done: int
    total: int
    fraction: float
    step: str


def estimate_remaining(seconds: float, fraction: float) -> float | None:
    """Seconds left at this pace; None before 2% (too early to tell) and once done.

    >>> estimate_remaining(30.0, 0.25)
    90.0
    >>> estimate_remaining(1.0, 0.01) is None
    True
    """
    if fraction < 0.02 or fraction >= 1.0:
        return None
    return seconds * (1.0 - fraction) / fraction


def _default_fit() -> Fit:
    from phenoforge.setbuild.api import fit_builders

    return fit_builders


FitKey = tuple[str | None, tuple[str, ...]]
FREE_QUERIES: FitKey = (None, ())
"""The fit on every library: what a researcher's own description (Assemble) is built with."""


def fit_keys(libraries: Sequence[Library]) -> list[FitKey]:
    """The (held-out group, further held-out groups) of every fit the installed libraries need, the fit on every
    library first (a description is built with it; the held-out ones only score the bundled libraries)."""
    from phenoforge.methods.set_building import installed_fit_keys

    keys = installed_fit_keys(libraries)
    return [FREE_QUERIES, *(key for key in keys if key != FREE_QUERIES)]


def library_fit_key(library: Library) -> FitKey:
    """The fit a benchmark of ``library`` reads (held out with its declared group, else its id, and its family)."""
    from phenoforge.methods.set_building import scoring_fit_groups

    group = str(getattr(library.manifest, "group", None) or library.library_id)
    held, extra = scoring_fit_groups(library.library_id, group)
    return held, tuple(extra)


def fits_found(con: duckdb.DuckDBPyConnection, dense: object | None) -> dict[FitKey, bool]:
    """Whether each fit the installed libraries need is stored (found without fitting)."""
    from phenoforge.engine.expansion import get_hierarchy
    from phenoforge.setbuild.api import stored_fit_files

    hierarchy = get_hierarchy(con)
    libraries = list_libraries(errors=[])
    return {
        (held, extra): stored_fit_files(hierarchy, dense, libraries, held, extra).found
        for held, extra in fit_keys(libraries)
    }


def fits_stored(con: duckdb.DuckDBPyConnection, dense: object | None) -> bool:
    """Whether every fit the installed libraries need is stored."""
    return all(fits_found(con, dense).values())


def _manifests() -> tuple[tuple[str, int, int], ...]:
    """Every installed library's manifest (folder, modification time, size): a library imported, rebuilt or
    removed changes it, and with it which fits are needed."""
    from phenoforge.config import libraries_dir

    found = []
    for manifest in libraries_dir().glob("*/manifest.json"):
        try:
            stat = manifest.stat()
        except OSError:
            continue
        found.append((manifest.parent.name, stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(found))


READ_SHARE = 0.4
"""The share of the fitting spent reading the training libraries' cohorts (once per process, during the first fit
that trains on each): about 40 s of 62 s when the models and parameters were already stored."""


class FitTally:
    """The whole fitting's fraction from ``fit_builders``' progress, never going backwards.

    Two kinds of report arrive: a fit's stages (``set builders ...: <stage>``, ``done`` of its stages) and, in
    the first stage, each training library's cohorts read (``<library id> <cohort id>``, counted from 0 per
    library, once per process). Reading counts for :data:`READ_SHARE` of the whole, by libraries read; the
    stages for the rest, by fits. A fit's stages start once its libraries are read, so by then at least its
    share of the reading is done.
    """

    def __init__(self, fits: int, libraries: Sequence[str]) -> None:
        self.fits = max(1, fits)
        self.libraries = max(1, len(libraries))
        self.read: dict[str, float] = {}
        self.read_floor = 0.0
        self.stages = 0.0
        self.fraction = 0.0

    def report(self, index: int, done: int, steps: int, message: str, what: str) -> tuple[float, str]:
        """(the whole fitting's fraction, what runs now) after one progress report of fit ``index``."""
        share = min(1.0, done / steps) if steps else 0.0
        if message.startswith("set builders"):
            if ": " in message:  # a stage (``set builders <what>`` alone: the fit is starting, nothing read yet)
                self.stages = max(self.stages, (index + share) / self.fits)
                self.read_floor = max(self.read_floor, (index + 1) / self.fits)
            step = message
        else:
            library = message.split(" ", 1)[0]
            self.read[library] = max(self.read.get(library, 0.0), share)
            step = f"set builders {what}: reading training cohorts ({message})"
        read = max(self.read_floor, min(1.0, sum(self.read.values()) / self.libraries))
        self.fraction = max(self.fraction, READ_SHARE * read + (1.0 - READ_SHARE) * self.stages)
        return min(1.0, self.fraction), step


class SetBuilderFits:
    """Fits the set builders in a thread once the dense index allows; every method is thread-safe."""

    def __init__(
        self,
        pool: Any,
        dense: DenseSource,
        models_dir: Path | None = None,
        fit: Fit | None = None,
        dense_autobuild: Callable[[], bool] | None = None,
    ) -> None:
        from phenoforge.setbuild.model_store import models_dir as default_models_dir

        self.pool = pool
        self.dense = dense
        self.models_dir = Path(models_dir) if models_dir is not None else default_models_dir()
        self._fit = fit
        self._dense_autobuild = dense_autobuild
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._state = FitState(state="missing")
        self._started = 0.0
        self._finished_seconds: float | None = None
        self._checked: tuple[object, float, dict[FitKey, bool]] | None = None
        self._written = 0.0

    # -- what the pages ask -------------------------------------------------------------------------------

    def status(self) -> FitState:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return self._running_state()
            if self._state.state == "failed":
                return self._state.model_copy()
        pending, dense = self._dense_input()
        if pending is not None:
            return FitState(state="waiting", message=pending)
        if self._stored(dense):
            with self._lock:
                seconds = self._finished_seconds or 0.0
            return FitState(state="ready", done=1, total=1, fraction=1.0, seconds=seconds, message="fitted")
        other = self._other_process()
        if other is not None:
            return other
        return FitState(state="missing", message="the set builders are not fitted yet")

    def ready(self) -> bool:
        return self.status().state == "ready"

    def start(self) -> bool:
        """Start the background fitting unless it runs or the fits are stored; while the dense index is still
        coming, the thread waits for it first (so the fits follow it whether or not a page is open); while
        another process fits, it waits for that one's lock, then finds its fits (or fits what a killed one left)."""
        state = self.status()
        if state.state not in ("missing", "failed", "waiting") and not state.elsewhere:
            return False
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return False
            self._state = (
                state if state.elsewhere else FitState(state="fitting" if state.state != "waiting" else "waiting")
            )
            self._started = time.monotonic()
            self._finished_seconds = None
            self._thread = threading.Thread(target=self._run, name="phenoforge-first-run-fits", daemon=True)
            self._thread.start()
        return True

    def wait(self, timeout: float = 60.0) -> FitState:
        """Block until a running fit ends (tests and scripts; pages poll instead)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.status()

    # -- inside ---------------------------------------------------------------------------------------------

    def _running_state(self) -> FitState:
        state = self._state.model_copy()
        if not state.elsewhere:
            state.seconds = time.monotonic() - self._started
            state.remaining = estimate_remaining(state.seconds, state.fraction)
        return state

    def _autobuild(self) -> bool:
        if self._dense_autobuild is not None:
            return self._dense_autobuild()
        from phenoforge.dashboard.resources import dense_autobuild_enabled

        return dense_autobuild_enabled()

    def _dense_input(self) -> tuple[str | None, object | None]:
        """(why the fits wait, None when they need not) and the dense retriever they are fitted with.

        The fits are keyed by the dense index they were fitted with, so they wait while one is building (or
        about to be); with a failed, corrupt or stale index, or none coming, they are fitted without, as the
        pages then run them.
        """
        dense_state = self.dense.status().state
        if dense_state == "ready":
            return None, self.dense.retriever()
        if dense_state == "building" or (dense_state == "missing" and self._autobuild()):
            return "waits for the dense index (the set builders are fitted with it)", None
        return None, None

    def _stored(self, dense: object | None) -> bool:
        found = self._found(dense)
        return bool(found) and all(found.values())

    def _found(self, dense: object | None) -> dict[FitKey, bool]:
        """Which fits are stored, looked at again after :data:`RECHECK_SECONDS` while one is missing, after
        :data:`READY_RECHECK_SECONDS` once all are there, and at once when a library manifest changes."""
        now = time.monotonic()
        key = (id(dense), _manifests())
        with self._lock:
            if self._checked is not None and self._checked[0] == key:
                complete = bool(self._checked[2]) and all(self._checked[2].values())
                if now - self._checked[1] < (READY_RECHECK_SECONDS if complete else RECHECK_SECONDS):
                    return self._checked[2]
        try:
            with self.pool.cursor() as con:
                found = fits_found(con, dense)
        except (OSError, PhenoforgeError, duckdb.Error):  # unreadable: not ready, and a fit says why
            found = {}
        with self._lock:
            self._checked = (key, now, found)
        return found

    def ready_for(self, library: Library | None) -> bool:
        """Whether the fit a page needs is stored: ``library``'s (a benchmark of it), or the one on every library
        (``None``: a description, as Assemble builds it). The fit on every library comes first."""
        state = self.status()
        if state.state == "ready":
            return True
        if state.state == "waiting":
            return False
        _pending, dense = self._dense_input()
        wanted = FREE_QUERIES if library is None else library_fit_key(library)
        return self._found(dense).get(wanted, False)

    def _other_process(self) -> FitState | None:
        """Another process's fitting, from its progress file while it holds the lock; None when none runs."""
        try:
            found = _Progress.model_validate_json((self.models_dir / PROGRESS_NAME).read_text(encoding="utf-8"))
        except (OSError, ValidationError, ValueError):
            return None
        if found.pid == os.getpid() or not process_alive(found.pid) or not self._lock_held_elsewhere():
            return None  # left by a process killed mid-fit: not a fitting that runs
        seconds = max(0.0, time.time() - found.started)
        return FitState(
            state="fitting",
            done=found.done,
            total=found.total,
            fraction=found.fraction,
            step=found.step,
            seconds=seconds,
            remaining=estimate_remaining(seconds, found.fraction),
            elsewhere=True,
        )

    def _lock_held_elsewhere(self) -> bool:
        import fcntl

        try:
            with open(self.models_dir / LOCK_NAME, "a") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return True
                fcntl.flock(handle, fcntl.LOCK_UN)
        except OSError:
            return False
        return False

    def _waiting(self) -> None:
        other = self._other_process()
        with self._lock:
            if other is not None:
                self._state = other
            else:
                self._state = FitState(
                    state="fitting", step="waiting for another phenoforge process to finish its fits", elsewhere=True
                )

    def _set(self, done: int, total: int, fraction: float, step: str) -> None:
        with self._lock:
            self._state = FitState(state="fitting", done=done, total=total, fraction=fraction, step=step)
            started = time.time() - (time.monotonic() - self._started)
            write = time.monotonic() - self._written >= PROGRESS_WRITE_SECONDS or done == total
            if write:
                self._written = time.monotonic()
        if write:
            progress = _Progress(pid=os.getpid(), started=started, done=done, total=total, fraction=fraction, step=step)
            # unwritable: another process then shows "waiting" without the figures; this one goes on
            with contextlib.suppress(OSError):
                write_atomically(
                    self.models_dir / PROGRESS_NAME, lambda handle: handle.write(progress.model_dump_json().encode())
                )

    def _run(self) -> None:
        fit = self._fit or _default_fit()
        not_stored: list[str] = []
        try:
            while True:
                pending, dense = self._dense_input()
                if pending is None:
                    break
                with self._lock:
                    self._state = FitState(state="waiting", message=pending)
                time.sleep(DENSE_POLL_SECONDS)
            with self._lock:  # the look below reads every library and loads the model's identity: seconds
                self._state = FitState(state="fitting", step="looking for fits stored before")
            if self._stored(dense):  # fitted meanwhile (another process, or all there for this index)
                with self._lock:
                    self._finished_seconds = time.monotonic() - self._started
                    self._state = FitState(state="ready", fraction=1.0, done=1, total=1, seconds=self._finished_seconds)
                return
            self.models_dir.mkdir(parents=True, exist_ok=True)
            with file_lock_polled(self.models_dir / LOCK_NAME, self._waiting):
                with self._lock:
                    self._started = time.monotonic()  # this process's own fitting starts now
                try:
                    con = self.pool.con.cursor()  # minutes of work: a cursor of its own, not a pooled one
                    libraries = list_libraries(errors=[])
                    keys = fit_keys(libraries)
                    total = len(keys)
                    tally = FitTally(total, [lib.library_id for lib in libraries])
                    for index, (held, extra) in enumerate(keys):
                        what = f"without {', '.join([held, *extra])}" if held else "on every library"

                        def progress(done: int, steps: int, message: str, index: int = index, what: str = what) -> None:
                            fraction, step = tally.report(index, done, steps, message, what)
                            self._set(index, total, fraction, step)

                        progress(0, 1, f"set builders {what}")
                        fitted = fit(con, dense, held, libraries, progress, also_held_out=extra)
                        not_stored += [n for n in getattr(fitted, "notes", []) if " not stored (" in n]
                        fraction, step = tally.report(index, 1, 1, f"set builders {what}: fitted", what)
                        self._set(index + 1, total, fraction, step)
                finally:
                    (self.models_dir / PROGRESS_NAME).unlink(missing_ok=True)
        except Exception as error:  # noqa: BLE001 - shown on Home; the thread must not die silently
            self._fail(_failure_text(error))
            return
        with self._lock:
            self._checked = None
        if not self._stored(dense):
            why = f" ({not_stored[0]})" if not_stored else ""
            self._fail(
                f"the set builders were fitted but not every fit could be stored under {self.models_dir}{why}; "
                "they are not offered until they are: free space or make it writable, then retry from Home"
            )
            return
        with self._lock:
            self._finished_seconds = time.monotonic() - self._started
            self._state = FitState(state="ready", fraction=1.0, done=1, total=1, seconds=self._finished_seconds)

    def _fail(self, message: str) -> None:
        with self._lock:
            self._state = FitState(state="failed", error=message, seconds=time.monotonic() - self._started)
            self._checked = None


def _failure_text(error: BaseException) -> str:
    if is_disk_full(error):
        what = "the disk is full"
    elif isinstance(error, PhenoforgeError):
        what = str(error)
    else:
        what = f"{type(error).__name__}: {error}"
    return (
        f"fitting the set builders failed ({what}); BM25, dense and hybrid still work. Nothing half-fitted is "
        "used: retry from Home, or run `python -m phenoforge build`."
    )


class FirstRunClock:
    """When this process's first-run build began (the first Home visit that found a step to build), when each
    step it built was first seen ready, and when every built-in method was: Home's timings."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.began: float | None = None
        self.ready_after: float | None = None
        self.built: dict[str, float | None] = {}
        """each step this process builds: the seconds after ``began`` it was first seen ready (None: not yet)"""

    def building(self, step: str) -> None:
        """``step`` is built by this process: the clock starts (once), and the step's readiness will be timed."""
        with self._lock:
            if self.began is None and self.ready_after is None:
                self.began = time.monotonic()
            if self.began is not None:
                self.built.setdefault(step, None)

    def step_ready(self, step: str) -> float | None:
        """Note ``step`` ready: the seconds after the start it was first seen so; None for a step this process
        did not build (it was there already)."""
        with self._lock:
            if self.began is None or step not in self.built:
                return None
            if self.built[step] is None:
                self.built[step] = time.monotonic() - self.began
            return self.built[step]

    def all_ready(self) -> float | None:
        """Every step ready: the first-run build's total seconds (None when it was all there already)."""
        with self._lock:
            if self.began is None:
                return None
            if self.ready_after is None:
                self.ready_after = time.monotonic() - self.began
            return self.ready_after

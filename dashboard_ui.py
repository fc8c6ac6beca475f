"""Streamlit glue shared by the pages: cached process-wide resources, and errors as messages.

It lives outside ``pages/`` (every file there becomes a page) and outside ``phenoforge`` (which
never imports streamlit). Pages hold layout only; numbers come from ``phenoforge.dashboard``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import duckdb
import streamlit as st
from streamlit.errors import StreamlitAPIException

from phenoforge.dashboard.explore import CohortMembership
from phenoforge.dashboard.first_run import FirstRunClock, FitState, SetBuilderFits
from phenoforge.dashboard.markdown import plain
from phenoforge.dashboard.resources import CursorPool, DenseManager, open_vocabulary, vocabulary_present
from phenoforge.engine.curated import Library, list_libraries
from phenoforge.errors import PhenoforgeError
from phenoforge.setbuild.api import fits_refused

PERCENT = "%.3f"


@st.cache_resource(show_spinner=False)
def cursor_pool() -> CursorPool:
    """One read-only connection per process; sessions borrow cursors from it."""
    return CursorPool(open_vocabulary())


@st.cache_resource(show_spinner=False)
def dense_manager() -> DenseManager:
    return DenseManager(cursor_pool())


@st.cache_resource(show_spinner=False)
def set_builder_fits() -> SetBuilderFits:
    """The first-run fitting of the set builders: one per process, its progress shared by every session."""
    return SetBuilderFits(cursor_pool(), dense_manager())


@st.cache_resource(show_spinner=False)
def first_run_clock() -> FirstRunClock:
    return FirstRunClock()


@st.cache_resource(show_spinner=False)
def cohort_membership() -> CohortMembership:
    return CohortMembership()


@st.cache_resource(show_spinner=False)
def shared_registry() -> dict[Any, Any]:
    """Process-wide memo for expensive, session-independent results (ranking caches)."""
    return {}


def leave_pages_folder_mode() -> None:
    """Run under app.py's navigation, so the sidebar names the start page Home.

    With a ``pages/`` folder beside app.py, Streamlit starts in its folder mode and, until some session
    has run app.py's ``st.navigation``, a direct link runs its page alone under a sidebar whose first
    entry reads "app". Switching the mode off and rerunning hands the same URL to app.py's navigation.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def page_header(title: str, caption: str | None = None) -> None:
    leave_pages_folder_mode()
    st.set_page_config(page_title=f"phenoforge · {title}", page_icon="🧬", layout="wide")
    st.title(title)
    if caption:
        st.caption(caption)


def require_vocabulary() -> None:
    """Pages other than Home need the vocabulary; Home builds it."""
    if not vocabulary_present():
        st.warning(
            "The vocabulary database is not built yet. Open the Home page: it builds it "
            "with a progress bar (about 3 seconds)."
        )
        home_link()
        st.stop()


def home_link() -> None:
    page_link("home.py", "Go to Home", ":material/home:", "/")


def page_link(page: str, label: str, icon: str, url: str | None = None) -> None:
    """A link to another page; where the page runs as its own app (AppTest: no page registry), a plain
    link to ``url``, or the label in bold when there is none."""
    try:
        st.page_link(page, label=label, icon=icon)
    except StreamlitAPIException:
        st.markdown(f"[{label}]({url})" if url else f"**{label}**")


@contextmanager
def cursor() -> Iterator[duckdb.DuckDBPyConnection]:
    with cursor_pool().cursor() as cur:
        yield cur


def libraries() -> list[Library]:
    """The readable libraries; a broken one is named in a warning and skipped."""
    broken: list[str] = []
    found = list_libraries(errors=broken)
    for problem in broken:
        st.warning(f"A cohort library is skipped: {plain(problem)}")
    return found


def require_libraries() -> list[Library]:
    found = libraries()
    if not found:
        st.warning(
            "No cohort library is installed yet. Open the Home page to build the bundled "
            "libraries, or import one with `python -m phenoforge library import FILE.csv`."
        )
        home_link()
        st.stop()
    return found


def library_picker(found: list[Library], key: str, default_id: str | None = None, container: Any = st) -> Library:
    ids = [lib.library_id for lib in found]
    if default_id not in ids:  # Elixhauser first: the broadest bundled library
        default_id = next((i for i in ids if i.startswith("elixhauser")), ids[0])
    index = ids.index(default_id)
    chosen = container.selectbox(
        "Cohort library",
        ids,
        index=index,
        key=key,
        format_func=lambda i: (
            f"{found[ids.index(i)].manifest.name} ({i}, {len(found[ids.index(i)].manifest.cohorts)} cohorts)"
        ),
    )
    return found[ids.index(chosen)]


def dense_retriever() -> Any:
    """The dense retriever once its index is ready, else None (BM25 methods still work)."""
    return dense_manager().retriever()


def dense_problem() -> str | None:
    """Why there is no dense retriever (None when there is one): recorded in benchmark reports."""
    status = dense_manager().status()
    if status.state == "ready":
        return None
    return status.error or f"the dense index is {status.state.replace('_', ' ')}"


def dense_notice() -> None:
    status = dense_manager().status()
    if status.state == "ready":
        return
    if status.state == "building":
        st.info(
            f"The dense index is building ({status.done}/{status.total}: {status.message}). "
            "BM25 methods work now; dense and hybrid wait for it (hybrid runs as BM25 alone)."
        )
    elif status.state == "failed":
        st.warning(status.error or "the dense index build failed")
    elif status.state in {"corrupt", "stale"}:
        st.warning(status.message)
    else:
        st.info(
            "The dense index is not built: dense methods are unavailable and hybrid runs as "
            "BM25 alone. Open the Home page to build it."
        )


def builder_fits_state() -> FitState | None:
    """The set builders' fitting (None before the vocabulary exists: nothing can be fitted yet)."""
    if not vocabulary_present():
        return None
    return set_builder_fits().status()


def builders_ready(library: Library | None = None, *, every: bool = False) -> bool:
    """Whether the set-building methods may be offered: the fit a benchmark of ``library`` reads is stored, or
    (``library`` None) the fit on every library a description is built with; ``every``: every first-run fit."""
    state = builder_fits_state()
    if state is None:
        return False
    if state.state == "ready":
        return True
    return not every and set_builder_fits().ready_for(library)


def builders_wait_text(state: FitState | None) -> str:
    """Why the set-building methods are not offered yet, and where to see it progress."""
    if state is None or state.state == "missing":
        return "The set builders are not fitted yet: open Home, which fits them in the background (first-run build)."
    if state.state == "fitting":
        return f"The set builders are still being fitted on Home ({state.percent}%)."
    if state.state == "waiting":
        return "The set builders are fitted on Home once the dense index is ready."
    if state.state == "ready":  # every first-run fit is stored: this one is another (a library copying a bundled one)
        return (
            "This library's set-builder fit is not one the first-run build makes (an imported library's cohorts that "
            "nearly copy bundled lists are answered by builders fitted without those lists' groups): run "
            "`python -m phenoforge benchmark --library <id> --methods learned` once, which fits them."
        )
    return state.error or "Fitting the set builders failed: see Home."


def builders_notice(what: str = "the set-building methods", ready: bool = False) -> None:
    """Say, unless the set builders are ``ready`` for the page, that ``what`` waits for them and what works now."""
    state = builder_fits_state()
    if ready or (state is not None and state.state == "ready"):
        return
    text = f"{builders_wait_text(state)} Until then {what} are not offered; BM25, dense and hybrid work now."
    if state is not None and state.state == "failed":
        st.warning(text)
    else:
        st.info(text)


def _refusal() -> str:
    try:
        text = builders_wait_text(builder_fits_state())
    except PhenoforgeError:
        text = builders_wait_text(None)
    return f"{text} A page never starts a fit: the first-run build on Home fits the set builders."


def run_page(main: Callable[[], None]) -> None:
    """Run a page; a PhenoforgeError becomes a message that says what to do, not a traceback.

    Pages never fit the set builders (:func:`~phenoforge.setbuild.api.fits_refused`): a stored fit is
    reused, a missing one is refused with a message, and the first-run build on Home fits them.
    """
    try:
        with fits_refused(_refusal()):
            main()
    except PhenoforgeError as error:
        st.error(plain(error))  # messages quote what was supplied (a file's names, a URL's ids)


def progress_callback(bar: Any, prefix: str = "") -> Callable[[int, int, str], None]:
    def report(done: int, total: int, message: str) -> None:
        fraction = min(1.0, done / total) if total else 1.0
        bar.progress(fraction, text=f"{prefix}{done}/{total} · {message}")

    return report

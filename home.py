"""phenoforge dashboard, Home: where to start, each library's latest full benchmark, what is loaded."""

from __future__ import annotations

import streamlit as st

import dashboard_ui as ui
from phenoforge import app_state
from phenoforge.dashboard.benchmark import available_methods, headline_rows, headlines
from phenoforge.dashboard.first_run import estimate_remaining
from phenoforge.dashboard.markdown import plain
from phenoforge.dashboard.resources import (
    build_vocabulary,
    claude_key_set,
    dense_autobuild_enabled,
    vocabulary_present,
)
from phenoforge.dashboard.status import (
    bundled_libraries_current,
    describe_vocabulary,
    library_summaries,
    stored_files,
)
from phenoforge.setbuild.builders import builder_names

BUNDLED_SOURCE = "simple-icd-10-cm"


def first_run_vocabulary() -> None:
    if vocabulary_present():
        return
    ui.first_run_clock().building("vocabulary")
    st.info("First run: building the ICD-10-CM vocabulary database from the embedded release.")
    bar = st.progress(0.0, text="starting")
    build_vocabulary(ui.progress_callback(bar, "vocabulary "))
    bar.progress(1.0, text="vocabulary ready")


def first_run_libraries(source: str) -> None:
    """Build the bundled libraries on the embedded default; other vocabularies keep theirs."""
    from phenoforge.libraries import ensure_bundled_libraries

    if source != BUNDLED_SOURCE or bundled_libraries_current():
        return
    ui.first_run_clock().building("libraries")
    st.info(
        "Building the bundled cohort libraries (Elixhauser, CMS-HCC V28 and V24, Quan 2005 Charlson and "
        "Elixhauser): missing, or from an older release."
    )
    bar = st.progress(0.0, text="starting")
    with ui.cursor() as con:
        ensure_bundled_libraries(con, progress=ui.progress_callback(bar, "libraries "))
    bar.progress(1.0, text="libraries ready")


def seconds_text(seconds: float | None) -> str:
    """`` (ready after 12 s)``: when a step this process built was ready, counted from the start of its first-run
    build; empty for a step that was there already."""
    return f" (ready after {seconds:.0f} s)" if seconds is not None else ""


@st.fragment(run_every=2.0)
def dense_progress() -> None:
    """Polls the background build; reruns the page once the index is ready."""
    status = ui.dense_manager().status()
    if status.state == "building":
        left = estimate_remaining(status.seconds, status.fraction)
        estimate = f", about {left:.0f} s left" if left is not None else ""
        st.progress(
            status.fraction,
            text=f"dense index: {status.done}/{status.total} · {status.message} ({status.seconds:.0f} s{estimate})",
        )
        st.caption("BM25 methods work meanwhile; dense ones wait for this.")
    elif status.state == "ready":
        st.success("Dense index: ready")
        if st.session_state.get("dense_was_building"):
            st.session_state["dense_was_building"] = False
            st.rerun()
    elif status.state == "failed":
        st.error(status.error or "the dense index build failed")


def dense_section() -> None:
    manager = ui.dense_manager()
    status = manager.status()
    if (
        status.state in {"missing", "failed"}
        and dense_autobuild_enabled()
        and not st.session_state.get("dense_autostart_tried")
    ):
        st.session_state["dense_autostart_tried"] = True
        if status.state == "missing":
            ui.first_run_clock().building("dense index")
            manager.start_build()
            status = manager.status()
    if status.state == "ready":
        st.success("Dense index: ready" + seconds_text(ui.first_run_clock().step_ready("dense index")))
        st.caption(status.message)
        if status.note:
            st.info(status.note)
        return
    if status.state == "building":
        st.session_state["dense_was_building"] = True
        dense_progress()
        return
    if status.state == "failed":
        st.error(status.error or "the dense index build failed")
    elif status.state in {"corrupt", "stale"}:
        st.warning(f"Dense index: {status.message}")
    else:
        st.info("Dense index: not built. Dense and hybrid methods need it; BM25 works without.")
    if st.button("Build the dense index now", key="build_dense"):
        ui.first_run_clock().building("dense index")
        manager.start_build()
        st.rerun()


@st.fragment(run_every=1.0)
def fits_progress() -> None:
    """Polls the background fitting; reruns the page once it ends (ready or failed)."""
    state = ui.set_builder_fits().status()
    if state.state == "fitting":
        st.progress(state.fraction, text=f"set builders: {state.progress_text()}")
        st.caption(
            "Fitting one model per held-out library group and one on every library; the set-building methods "
            "are offered on every page once it ends. BM25, dense and hybrid work meanwhile."
        )
    elif state.state == "waiting":
        st.info(f"Set builders: {state.message}.")
    elif st.session_state.get("fits_were_running"):
        st.session_state["fits_were_running"] = False
        st.rerun()


def builders_section() -> None:
    fits = ui.set_builder_fits()
    state = fits.status()
    if state.state in ("missing", "waiting"):
        ui.first_run_clock().building("set builders")
        fits.start()
        state = fits.status()
    names = ", ".join(builder_names())
    if state.state == "ready":
        st.success(f"Set builders: ready ({names})" + seconds_text(ui.first_run_clock().step_ready("set builders")))
        return
    if state.state in ("fitting", "waiting"):
        st.session_state["fits_were_running"] = True
        fits_progress()
        return
    st.error(state.error or "fitting the set builders failed")
    if st.button("Retry fitting the set builders", key="retry_fits"):
        fits.start()
        st.rerun()


def first_run_section(source: str) -> None:
    """The first-run build, step by step: vocabulary, libraries, dense index, set builders; then whether every
    built-in method is ready."""
    st.subheader("First-run build")
    clock = ui.first_run_clock()
    first_run_libraries(source)
    st.success("Vocabulary: ready" + seconds_text(clock.step_ready("vocabulary")))
    summaries, _problems = library_summaries()
    if summaries:
        st.success(f"Cohort libraries: ready ({len(summaries)})" + seconds_text(clock.step_ready("libraries")))
    else:
        st.info("Cohort libraries: none installed (the set builders are fitted on bundled libraries only).")
    dense_section()
    builders_section()
    dense_ready = ui.dense_manager().status().state == "ready"
    builders_ready = ui.set_builder_fits().status().state == "ready"
    if dense_ready and builders_ready:
        total = clock.all_ready()
        took = f" (first-run build: {total:.0f} s)" if total is not None else ""
        st.success(f"**All methods ready**{took}.")
    else:
        ready = available_methods(dense_ready, builders_ready)
        st.caption(f"Ready now: {', '.join(ready)}. The other built-in methods wait for the steps above.")


def loaded_section() -> None:
    with ui.cursor() as con:
        info = describe_vocabulary(con)
    st.subheader("Vocabulary")
    st.markdown(f"**{info.vocabulary_release}** · source `{info.source}`")
    cols = st.columns(3)
    cols[0].metric("ICD-10-CM concepts", f"{info.n_icd10cm:,}")
    cols[1].metric("Billable codes", f"{info.n_billable:,}")
    cols[2].metric("Cohort libraries", len(library_summaries()[0]))
    st.caption(
        f"Built {info.built_at} · build {info.build_id[:12]} · "
        + ", ".join(f"{kind}: {n:,}" for kind, n in sorted(info.counts_by_kind.items()))
    )

    st.subheader("Cohort libraries")
    summaries, problems = library_summaries()
    for problem in problems:
        st.error(problem)
    if summaries:
        st.dataframe(
            [
                {
                    "library": s.library_id,
                    "name": s.name,
                    "cohorts": s.n_cohorts,
                    "listed codes": s.n_listed_codes,
                    "source": s.url,
                }
                for s in summaries
            ],
            hide_index=True,
            width="stretch",
            key="home_libraries",
            column_config={
                "library": st.column_config.TextColumn("library", width="medium"),
                "source": st.column_config.LinkColumn("source", display_text="link", width="small"),
            },
        )
        # Citations are long: in full below the table rather than cut in a column.
        st.caption("  \n".join(f"{plain(s.library_id)}: {plain(s.citation)}" for s in summaries))
    else:
        st.info(
            "No cohort library yet: import one with `python -m phenoforge library import "
            "FILE.csv`, or build the bundled ones with `python -m phenoforge build`."
        )

    st.subheader("Agent")
    if claude_key_set():
        st.success("Claude API key: set (the Decomposition page can use Claude)")
    else:
        st.info(
            "Claude API key: not set. The offline decomposer is used; set ANTHROPIC_API_KEY "
            "or add it to .streamlit/secrets.toml to use Claude."
        )
    stored_files_section()


def stored_files_section() -> None:
    """What lies under data/, by the descriptions `clean` reads (phenoforge.artifacts)."""
    rows, unknown = stored_files()
    with st.expander("Files under data/"):
        st.dataframe(rows, hide_index=True, width="stretch", key="home_stored_files")
        if unknown:
            st.caption(plain(f"Not made by phenoforge (left alone by clean): {', '.join(unknown)}"))
        st.caption("`python -m phenoforge clean --dry-run` lists what under data/models nothing current reads.")


def start_here() -> None:
    """Where a new user starts: the three things the dashboard does, each one click away."""
    st.subheader("Start here")
    cols = st.columns(3)
    for column, page, label, icon, text in (
        (
            cols[0],
            "pages/1_Benchmark.py",
            "Benchmark a library",
            ":material/bar_chart:",
            "Score every method on a library's cohorts and see which builds the closest lists.",
        ),
        (
            cols[1],
            "pages/6_Assemble.py",
            "Build a list from a description",
            ":material/checklist:",
            "Describe a population; review each proposed code; export a concept set.",
        ),
        (
            cols[2],
            "pages/5_Explore.py",
            "Search the vocabulary",
            ":material/search:",
            "Look up a code, or compare BM25, dense and hybrid search for a phrase.",
        ),
    ):
        with column:
            ui.page_link(page, label, icon)
            st.caption(text)


def leaderboard_section() -> None:
    st.subheader("Latest full benchmark per library")
    summaries, _problems = library_summaries()
    found = headlines(app_state.list_benchmark_runs(limit=500), {s.library_id: s.n_cohorts for s in summaries})
    if not found:
        st.info("No library has been benchmarked over all its cohorts yet.")
        ui.page_link("pages/1_Benchmark.py", "Run one on the Benchmark page", ":material/bar_chart:")
        return
    st.caption(
        "Each library's newest run over all its cohorts (uploads and runs on a subset are left out); "
        "hierarchical score, higher is better."
    )
    st.dataframe(
        headline_rows(found),
        hide_index=True,
        width="stretch",
        key="home_headlines",
        column_config={"hierarchical": st.column_config.NumberColumn("hierarchical", format=ui.PERCENT)},
    )


def main() -> None:
    ui.page_header(
        "phenoforge",
        "From a cohort description to a defensible ICD-10-CM code list, and a benchmark of how well retrieval does it.",
    )
    first_run_vocabulary()
    with ui.cursor() as con:
        source = describe_vocabulary(con).source
    first_run_section(source)
    start_here()
    leaderboard_section()
    loaded_section()


ui.run_page(main)

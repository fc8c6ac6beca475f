"""Decomposition: what turning a free-text description into seed terms costs, case by case."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import dashboard_ui as ui
from phenoforge.dashboard.decomposition import (
    SPLITS,
    UPLOADED,
    case_label,
    case_rows,
    case_sets,
    cases_of,
    gap_sentence,
    landing_share,
    missing_cases_hint,
    run_decomposition,
    run_status,
    runnable_cases,
    split_options,
    spread_rows,
    uploaded_cases,
)
from phenoforge.dashboard.markdown import plain
from phenoforge.dashboard.resources import claude_key_set
from phenoforge.errors import PhenoforgeError

SCORES = ("baseline", "decomposed")


def status_banner(report) -> bool:  # type: ignore[no-untyped-def]
    status = run_status(report)
    if status.level == "error":
        st.error(status.message)
        return False
    if status.level == "warning":
        st.warning(status.message)
    return True


def results_section(report, label: str) -> None:  # type: ignore[no-untyped-def]
    st.subheader(label)
    if not status_banner(report):
        return
    st.markdown(f"**{gap_sentence(report.mean_gap)}** (mean hierarchical score over the cases scored).")
    cols = st.columns(4)
    cols[0].metric("Baseline (name searched)", f"{report.mean_baseline_hierarchical_score:.3f}")
    cols[1].metric("Decomposed", f"{report.mean_decomposed_hierarchical_score:.3f}")
    cols[2].metric("Cases scored", report.n_scored)
    cols[3].metric("Term on target", f"{landing_share(report):.0%}", help="cases with a seed term on the target")
    st.caption(
        f"Retrieval: {report.retrieval} · k={report.k} · where terms landed: "
        + (", ".join(f"{k} {v}" for k, v in sorted(report.landed_counts.items())) or "—")
    )
    for message in report.skipped:
        st.caption(f"skipped {plain(message)}")
    st.dataframe(
        pd.DataFrame(case_rows(report)),
        hide_index=True,
        width="stretch",
        key="dec_table",
        column_config={
            **{c: st.column_config.NumberColumn(c, format="%.3f", width=80) for c in SCORES},
            "difference": st.column_config.NumberColumn(
                "difference", format="%+.3f", width=80, help="decomposed − baseline: above zero, decomposition helped"
            ),
            "cohort": st.column_config.TextColumn("cohort", width=110),
            "description": st.column_config.TextColumn("description", width=200),
            "seed terms": st.column_config.TextColumn("seed terms", width=160),
            "error": st.column_config.TextColumn("error", width=60),
        },
    )
    st.markdown("**Per case**")
    for r in report.results:
        if r.error:
            continue
        with st.expander(case_label(plain(r.cohort_id), plain(r.population_description), r.gap)):
            cols = st.columns(3)
            cols[0].metric("Baseline (cohort name searched)", f"{r.baseline_hierarchical_score:.3f}")
            cols[1].metric("Decomposed", f"{r.decomposed_hierarchical_score:.3f}")
            cols[2].metric("Curated codes", r.n_ground_truth)
            st.markdown(f"Seed terms: {plain(', '.join(r.seed_terms)) or '—'}")
            if r.term_resolutions:
                st.dataframe(
                    pd.DataFrame(
                        [
                            {
                                "term": t.term,
                                "landed": t.landed,
                                "tier": t.tier,
                                "matched cohorts": ", ".join(
                                    f"{i} {n}"
                                    for i, n in zip(t.matched_cohort_ids, t.matched_cohort_names, strict=False)
                                ),
                                "codes": len(t.codes),
                                "note": t.note or "",
                            }
                            for t in r.term_resolutions
                        ]
                    ),
                    hide_index=True,
                    width="stretch",
                )
            st.write(f"Predicted codes ({len(r.predicted_codes)}): " + (", ".join(r.predicted_codes[:60]) or "—"))


def repeat_section(report, label: str) -> None:  # type: ignore[no-untyped-def]
    st.subheader(label)
    if report.n_runs_scored == 0:
        st.error(f"no run scored a case: {plain(run_status(report.runs[0]).message)}")
        return
    for number, run in enumerate(report.runs, start=1):
        status = run_status(run)
        if status.level != "ok":
            st.warning(f"run {number}: {plain(status.message)}")
    st.markdown(f"**{gap_sentence(report.mean_gap)}** (mean over cases and runs).")
    cols = st.columns(2)
    cols[0].metric(
        "95% CI, decomposed − baseline", f"{-report.mean_gap_ci_high:+.3f} to {-report.mean_gap_ci_low:+.3f}"
    )
    cols[1].metric("SD of the per-run means", f"{report.stdev_mean_gap:.3f}")
    st.caption(
        f"{report.n} runs; the interval is a bootstrap over cases of each case's mean across runs; above zero, "
        "decomposition scores higher. Per run, decomposed − baseline: "
        + ", ".join(f"{-gap:+.3f}" for gap in report.mean_gap_per_run)
    )
    st.dataframe(
        pd.DataFrame(spread_rows(report)),
        hide_index=True,
        width="stretch",
        key="dec_spread",
        column_config={
            c: st.column_config.NumberColumn(format="%+.3f") for c in ("mean difference", "lowest", "highest")
        }
        | {"sd": st.column_config.NumberColumn(format="%.3f")},
    )


def main() -> None:
    ui.page_header(
        "Decomposition",
        "Each test case's description is decomposed into seed terms "
        "and resolved (curated cohorts first); its score is compared with searching "
        "the cohort's own name.",
    )
    ui.require_vocabulary()
    ui.require_libraries()
    ui.dense_notice()
    sets = case_sets()
    names = [*sets, UPLOADED]
    runnable = {name: runnable_cases(cases) for name, cases in sets.items()}
    default = next((i for i, n in enumerate(names) if runnable.get(n)), 0)
    key_set = claude_key_set()
    cols = st.columns([4, 2, 2, 1, 1])
    chosen = cols[0].selectbox(
        "Test cases",
        names,
        index=default,
        key="dec_set",
        format_func=lambda n: (
            n
            if n == UPLOADED
            else f"{n} ({len(runnable[n])} of {len(sets[n])} cases runnable here"
            + ("; its library is not installed" if not runnable[n] else "")
            + ")"
        ),
    )
    split = cols[1].radio(
        "Split",
        split_options(sets.get(chosen, [])),
        horizontal=True,
        key="dec_split",
        format_func=SPLITS.get,
        help="Development cases are what the decomposer was tuned on; report the test half.",
    )
    decomposer = cols[2].radio(
        "Decomposer",
        ["claude", "offline"] if key_set else ["offline"],
        horizontal=True,
        key="dec_decomposer",
        help=None if key_set else "Set ANTHROPIC_API_KEY to use Claude.",
    )
    k = int(cols[3].number_input("k", 1, 100, 10, key="dec_k"))
    repeat = int(
        cols[4].number_input(
            "Repeats",
            1,
            20,
            1,
            key="dec_repeat",
            help="Run N times (Claude uncached) for per-case spread and the mean's CI",
        )
    )
    if chosen == UPLOADED:
        upload = st.file_uploader(
            "Case file (CSV: population_description, cohort_id, optional library, source)",
            type=["csv"],
            key="dec_upload",
        )
        if upload is None:
            st.caption("Upload a CSV; each line is scored against the installed library holding its cohort.")
            return
        try:
            cases = uploaded_cases(upload.getvalue(), upload.name)
        except PhenoforgeError as error:
            st.error(plain(error))
            return
    else:
        cases = cases_of(runnable[chosen], split)
    if not cases:
        st.warning(missing_cases_hint(chosen, sets.get(chosen, [])))
        return
    if st.button(
        f"Run {len(cases)} test cases" + (f" × {repeat}" if repeat > 1 else ""), type="primary", key="dec_run"
    ):
        bar = st.progress(0.0, text="starting")
        with ui.cursor() as con:
            report = run_decomposition(
                con,
                cases,
                decomposer,
                dense=ui.dense_retriever(),
                k=k,
                progress=ui.progress_callback(bar, "case "),
                repeat=repeat,
            )
        bar.empty()
        st.session_state["dec_report"] = (chosen, split, decomposer, repeat, report)
    stored = st.session_state.get("dec_report")
    if stored is None:
        st.caption(f"{len(cases)} cases ready; press Run.")
        return
    used_set, used_split, used, used_repeat, report = stored
    label = f"{used} decomposer · {used_set} cases" + (f" · {SPLITS[used_split]}" if used_split != "all" else "")
    if used_repeat > 1:
        repeat_section(report, f"{label} · {used_repeat} runs")
    else:
        results_section(report, label)


ui.run_page(main)

"""Decomposition: what turning a free-text description into seed terms costs, case by case."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import dashboard_ui as ui
from phenoforge.dashboard.decomposition import case_sets, run_decomposition, runnable_cases
from phenoforge.dashboard.resources import claude_key_set


def results_section(report, label: str) -> None:  # type: ignore[no-untyped-def]
    st.subheader(label)
    cols = st.columns(4)
    cols[0].metric("Mean gap (baseline − decomposed)", f"{report.mean_gap:+.4f}")
    cols[1].metric("Mean baseline", f"{report.mean_baseline_hierarchical_score:.4f}")
    cols[2].metric("Mean decomposed", f"{report.mean_decomposed_hierarchical_score:.4f}")
    cols[3].metric("Cases scored", report.n_scored)
    st.caption(f"Retrieval: {report.retrieval} · k={report.k} · where terms landed: "
               + (", ".join(f"{k} {v}" for k, v in sorted(report.landed_counts.items())) or "—"))
    for r in report.results:
        if r.error:
            st.warning(f"{r.cohort_id}: {r.error}")
    for message in report.skipped:
        st.caption(f"skipped {message}")
    st.dataframe(pd.DataFrame([{
        "cohort": r.cohort_id, "library": r.library_id, "name": r.cohort_name,
        "description": r.population_description, "seed terms": "; ".join(r.seed_terms),
        "baseline": r.baseline_hierarchical_score, "decomposed": r.decomposed_hierarchical_score,
        "gap": r.gap,
    } for r in report.results]), hide_index=True, width="stretch", key="dec_table",
        column_config={c: st.column_config.NumberColumn(format="%.3f")
                       for c in ("baseline", "decomposed", "gap")})
    st.markdown("**Per case**")
    for r in report.results:
        with st.expander(f"{r.cohort_id} · {r.population_description} · gap {r.gap:+.3f}"):
            cols = st.columns(3)
            cols[0].metric("Baseline (cohort name searched)", f"{r.baseline_hierarchical_score:.3f}")
            cols[1].metric("Decomposed", f"{r.decomposed_hierarchical_score:.3f}")
            cols[2].metric("Curated codes", r.n_ground_truth)
            st.write(f"Seed terms: {', '.join(r.seed_terms) or '—'}")
            if r.term_resolutions:
                st.dataframe(pd.DataFrame([{
                    "term": t.term, "landed": t.landed, "tier": t.tier,
                    "matched cohorts": ", ".join(f"{i} {n}" for i, n in
                                                 zip(t.matched_cohort_ids, t.matched_cohort_names,
                                                     strict=False)),
                    "codes": len(t.codes), "note": t.note or "",
                } for t in r.term_resolutions]), hide_index=True, width="stretch")
            st.write(f"Predicted codes ({len(r.predicted_codes)}): "
                     + (", ".join(r.predicted_codes[:60]) or "—"))


def main() -> None:
    ui.page_header("Decomposition", "Each test case's description is decomposed into seed terms "
                   "and resolved (curated cohorts first); its score is compared with searching "
                   "the cohort's own name.")
    ui.require_vocabulary()
    ui.require_libraries()
    ui.dense_notice()
    sets = case_sets()
    runnable = {name: runnable_cases(cases) for name, cases in sets.items()}
    names = list(sets)
    default = next((i for i, n in enumerate(names) if runnable[n]), 0)
    key_set = claude_key_set()
    cols = st.columns([2, 2, 1])
    chosen = cols[0].selectbox("Test cases", names, index=default, key="dec_set",
                               format_func=lambda n: f"{n} ({len(runnable[n])} of "
                               f"{len(sets[n])} runnable here)")
    decomposer = cols[1].radio(
        "Decomposer", ["claude", "offline"] if key_set else ["offline"], horizontal=True,
        key="dec_decomposer", help=None if key_set else "Set ANTHROPIC_API_KEY to use Claude.",
    )
    k = int(cols[2].number_input("k", 1, 100, 10, key="dec_k"))
    cases = runnable[chosen]
    if not cases:
        st.warning("None of these cases' libraries and cohorts is installed here: build the "
                   "bundled libraries on the Home page, or fetch the OHDSI library for the "
                   "'ohdsi' set.")
        return
    if st.button(f"Run {len(cases)} test cases", type="primary", key="dec_run"):
        bar = st.progress(0.0, text="starting")
        with ui.cursor() as con:
            report = run_decomposition(con, cases, decomposer, dense=ui.dense_retriever(), k=k,
                                       progress=ui.progress_callback(bar, "case "))
        bar.empty()
        st.session_state["dec_report"] = (chosen, decomposer, report)
    stored = st.session_state.get("dec_report")
    if stored is None:
        st.caption(f"{len(cases)} cases ready; press Run.")
        return
    used_set, used, report = stored
    results_section(report, f"{used} decomposer · {used_set} cases")


ui.run_page(main)

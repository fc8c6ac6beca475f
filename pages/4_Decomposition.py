"""Decomposition: what turning a free-text description into seed terms costs, case by case."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import dashboard_ui as ui
from phenoforge.dashboard.decomposition import run_decomposition, test_cases_for
from phenoforge.dashboard.resources import claude_key_set


def main() -> None:
    ui.page_header("Decomposition", "Each test case's description is decomposed into seed terms "
                   "and resolved; its score is compared with searching the cohort's own name.")
    ui.require_vocabulary()
    libraries = ui.require_libraries()
    with_cases = [lib for lib in libraries if test_cases_for(lib)]
    if not with_cases:
        st.warning("No installed library holds the decomposition test cases' cohorts (OHDSI "
                   "Phenotype Library ids such as 503 or 519). Install the OHDSI library: "
                   "`python -m phenoforge athena fetch-ohdsi` (see the README).")
        return
    ui.dense_notice()
    library = ui.library_picker(with_cases, key="dec_library",
                                default_id=next((lib.library_id for lib in with_cases
                                                 if lib.library_id.startswith("ohdsi")), None))
    cases = test_cases_for(library)
    key_set = claude_key_set()
    cols = st.columns([2, 1, 1])
    decomposer = cols[0].radio(
        "Decomposer", ["claude", "offline"] if key_set else ["offline"], horizontal=True,
        key="dec_decomposer",
        help=None if key_set else "Set ANTHROPIC_API_KEY to use Claude.",
    )
    k = int(cols[1].number_input("k", 1, 100, 10, key="dec_k"))
    cols[2].metric("Test cases", len(cases))
    if st.button("Run decomposition test cases", type="primary", key="dec_run"):
        bar = st.progress(0.0, text="starting")
        with ui.cursor() as con:
            report = run_decomposition(con, library, decomposer, dense=ui.dense_retriever(), k=k,
                                       cases=cases, progress=ui.progress_callback(bar, "case "))
        bar.empty()
        st.session_state["dec_report"] = (library.library_id, decomposer, k, report)
    stored = st.session_state.get("dec_report")
    if stored is None:
        st.caption(f"{len(cases)} cases ready; press Run.")
        return
    library_id, used, used_k, report = stored
    st.subheader(f"{used} decomposer · {library_id} · k={used_k}")
    errors = [r for r in report.results if r.error]
    cols = st.columns(3)
    cols[0].metric("Mean gap (baseline − decomposed)", f"{report.mean_gap:+.4f}")
    scored = [r for r in report.results if not r.error]
    cols[1].metric("Mean baseline", f"{sum(r.baseline_hierarchical_score for r in scored) / max(1, len(scored)):.4f}")
    cols[2].metric("Mean decomposed",
                   f"{sum(r.decomposed_hierarchical_score for r in scored) / max(1, len(scored)):.4f}")
    for r in errors:
        st.warning(f"{r.cohort_id}: {r.error}")
    st.dataframe(pd.DataFrame([{
        "cohort": r.cohort_id, "name": r.cohort_name, "description": r.population_description,
        "seed terms": "; ".join(r.seed_terms), "baseline": r.baseline_hierarchical_score,
        "decomposed": r.decomposed_hierarchical_score, "gap": r.gap,
    } for r in report.results]), hide_index=True, width="stretch", key="dec_table",
        column_config={c: st.column_config.NumberColumn(format="%.3f")
                       for c in ("baseline", "decomposed", "gap")})
    st.markdown("**Per case**")
    for r in report.results:
        with st.expander(f"{r.cohort_id} · {r.population_description} · gap {r.gap:+.3f}"):
            st.write(f"Seed terms: {', '.join(r.seed_terms) or '—'}")
            if r.term_resolutions:
                st.dataframe(pd.DataFrame([{
                    "term": t.term, "landed": t.landed, "tier": t.tier,
                    "matched cohorts": ", ".join(f"{i} {n}" for i, n in
                                                 zip(t.matched_cohort_ids, t.matched_cohort_names,
                                                     strict=False)),
                    "codes": len(t.codes),
                } for t in r.term_resolutions]), hide_index=True, width="stretch")
            st.write(f"Predicted codes ({len(r.predicted_codes)}): "
                     + (", ".join(r.predicted_codes[:60]) or "—"))


ui.run_page(main)

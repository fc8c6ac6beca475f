"""Benchmark: run methods over a library's cohorts live, compare them honestly, keep every run."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from streamlit.errors import StreamlitAPIException

import dashboard_ui as ui
from phenoforge import app_state
from phenoforge.app_state import BenchmarkParameters
from phenoforge.dashboard.benchmark import (
    BenchmarkRun,
    available_methods,
    cohort_rows,
    coverage_precision_chart,
    drilldown_link,
    expert_agreement_lines,
    import_run_and_save,
    method_flags,
    method_help,
    method_summaries,
    progress_text,
    report_csv,
    report_json,
    run_and_save,
    saved_run,
    significance,
    user_methods_enabled,
)
from phenoforge.dashboard.markdown import chart_text, plain
from phenoforge.errors import PhenoforgeError


def controls(libraries: list) -> tuple[object, BenchmarkParameters, str, bool]:
    dense_ready = ui.dense_retriever() is not None
    library = ui.library_picker(libraries, key="bench_library")
    with st.form("benchmark_form"):
        entries = library.manifest.cohorts
        names = {e.cohort_id: e.cohort_name for e in entries}
        cohorts = st.multiselect(
            "Cohorts (leave empty for all)",
            list(names),
            default=[],
            key=f"bench_cohorts_{library.library_id}",
            format_func=lambda c: f"{c} · {names.get(c, c)}",
        )
        options = available_methods(dense_ready)
        default = [m for m in ("bm25", "hybrid", "dense", "learned") if m in options]
        methods = st.multiselect(
            "Methods",
            options,
            default=default,
            key="bench_methods",
            help="; ".join(f"{m}: {h}" for m, h in method_help().items()),
        )
        custom = ""
        if user_methods_enabled():  # a server setting: off, the page runs registered methods only
            custom = st.text_input(
                "Your own methods (module:function, comma-separated)",
                key="bench_custom",
                help="a function (context, task) -> codes, importable from where the dashboard runs",
            )
        cols = st.columns(3)
        k = int(cols[0].number_input("k (codes per method)", 1, 200, 25, key="bench_k"))
        weight = float(cols[1].slider("dense_weight", 0.0, 1.0, 0.5, 0.05, key="bench_weight"))
        label = cols[2].text_input("Label (optional)", key="bench_label")
        submitted = st.form_submit_button("Run benchmark", type="primary")
    chosen = [c for c in cohorts if c in names] or list(names)
    methods = [*methods, *(m.strip() for m in custom.split(",") if m.strip())]
    parameters = BenchmarkParameters(methods=methods, k=k, dense_weight=weight, cohort_ids=chosen)
    return library, parameters, label, submitted


def run_now(library: object, parameters: BenchmarkParameters, label: str) -> None:
    if not parameters.methods:
        st.warning("Choose at least one method.")
        return
    bar = st.progress(0.0, text="starting")

    def progress(done: int, total: int, message: str) -> None:
        fraction, text = progress_text(done, total, message)
        bar.progress(fraction, text=text)

    try:
        with ui.cursor() as con:
            run = run_and_save(
                con,
                library,
                parameters,
                dense=ui.dense_retriever(),  # type: ignore[arg-type]
                progress=progress,
                label=label,
                dense_problem=ui.dense_problem(),
            )
    except PhenoforgeError as error:
        bar.empty()
        st.error(plain(error))
        return
    bar.empty()
    st.session_state["bench_run_id"] = run.run_id
    st.session_state["bench_reopen"] = run.run_id
    st.success(
        f"Run {run.run_id} finished and saved: {len(run.report.results)} results over "
        f"{len(parameters.cohort_ids)} cohorts."
    )


def upload_section(library: object) -> None:
    with st.expander("Score your own run (CSV or JSON)"):
        st.caption(
            "CSV columns `cohort_id, code[, rank, score]`, one row per code; or JSON "
            '`{"cohorts": {cohort_id: [codes]}}`. It is checked against this library, scored on the '
            "cohorts it answers beside the methods you pick, and saved with the other runs."
        )
        with st.form("bench_upload_form"):
            upload = st.file_uploader("Run file", type=["csv", "json"], key="bench_upload")
            name = st.text_input("Run name (default: the file name)", key="bench_upload_name")
            compare = st.multiselect(
                "Compare with",
                available_methods(ui.dense_retriever() is not None),
                default=["hybrid"],
                key="bench_upload_compare",
            )
            submitted = st.form_submit_button("Score the run")
        if submitted:
            if upload is None:
                st.warning("Choose a run file first.")
                return
            try:
                with ui.cursor() as con:
                    run = import_run_and_save(
                        con,
                        library,
                        upload.getvalue(),
                        upload.name,
                        compare,  # type: ignore[arg-type]
                        dense=ui.dense_retriever(),
                        name=name,
                    )
            except PhenoforgeError as error:
                st.error(plain(error))
                return
            st.session_state["bench_run_id"] = run.run_id
            st.success(
                f"Run {run.run_id}: the imported run scored on {len(run.parameters.cohort_ids)} cohorts and saved."
            )


def summary_section(run: BenchmarkRun, baseline: str, libraries: list) -> None:
    summaries = method_summaries(run.report, baseline=baseline)
    with ui.cursor() as con:
        line = expert_agreement_lines(con, libraries).get(run.library_id)
    if line is not None:
        st.info(
            f"Expert agreement for {run.library_id}: {line.mean_hierarchical_score:.3f} hierarchical, "
            f"{line.mean_exact_f1:.3f} exact F1, over {line.n_pairs} cohorts that another library's experts "
            "defined for the same condition (the ceiling a method can be expected to reach)."
        )
    for method, flag in method_flags(run.report).items():
        if flag.startswith("degraded"):
            st.warning(f"{plain(method)}: {plain(flag)}")
        else:
            st.caption(f"{plain(method)}: {plain(flag)}")
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "method": s.method,
                    "cohorts": s.n_cohorts,
                    "hierarchical": s.mean_hierarchical,
                    "hierarchical 95% CI": f"{s.ci_hierarchical[0]:.3f} – {s.ci_hierarchical[1]:.3f}",
                    "Δ hierarchical": s.delta_hierarchical,
                    "coverage": s.mean_coverage,
                    "coverage 95% CI": f"{s.ci_coverage[0]:.3f} – {s.ci_coverage[1]:.3f}",
                    "Δ coverage": s.delta_coverage,
                    "over-inclusion": s.mean_over_inclusion,
                    "over-inclusion 95% CI": f"{s.ci_over_inclusion[0]:.3f} – {s.ci_over_inclusion[1]:.3f}",
                    "Δ over-inclusion": s.delta_over_inclusion,
                    "exact F1": s.mean_exact_f1,
                }
                for s in summaries
            ]
        ),
        hide_index=True,
        width="stretch",
        key="bench_summary",
        column_config={
            c: st.column_config.NumberColumn(c, format="%.3f")
            for c in (
                "hierarchical",
                "Δ hierarchical",
                "coverage",
                "Δ coverage",
                "over-inclusion",
                "Δ over-inclusion",
                "exact F1",
            )
        },
    )
    bars = go.Figure()
    for _metric, label, mean_of, ci_of in (
        ("coverage", "Coverage", lambda s: s.mean_coverage, lambda s: s.ci_coverage),
        ("over_inclusion", "Over-inclusion", lambda s: s.mean_over_inclusion, lambda s: s.ci_over_inclusion),
        ("hierarchical", "Hierarchical score", lambda s: s.mean_hierarchical, lambda s: s.ci_hierarchical),
    ):
        means = [mean_of(s) for s in summaries]
        bars.add_bar(
            name=label,
            x=[chart_text(s.method) for s in summaries],
            y=means,
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [ci_of(s)[1] - m for s, m in zip(summaries, means, strict=True)],
                "arrayminus": [m - ci_of(s)[0] for s, m in zip(summaries, means, strict=True)],
            },
        )
    if line is not None:
        bars.add_hline(
            y=line.mean_hierarchical_score,
            line_dash="dash",
            line_color="#444",
            annotation_text=f"expert agreement {line.mean_hierarchical_score:.3f}",
        )
    bars.update_layout(
        barmode="group",
        title="Means per method (95% bootstrap CI)",
        yaxis={"range": [0, 1]},
        height=380,
        margin={"t": 50, "b": 30},
    )
    left, right = st.columns(2)
    left.plotly_chart(bars, width="stretch", key="bench_bars")
    right.altair_chart(coverage_precision_chart(run.report), key="bench_scatter")


def tests_section(run: BenchmarkRun, baseline: str) -> None:
    comparisons = significance(run.report, baseline)
    if not comparisons:
        st.caption("Add another method to compare it with the baseline.")
        return
    st.markdown(
        f"**Paired permutation tests against `{baseline}`** (hierarchical score, "
        "per cohort; Holm-corrected across the methods)"
    )
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "method": c.method_b,
                    "cohorts": c.n_cohorts,
                    "mean Δ": c.mean_diff,
                    "p": c.p_value,
                    "p (Holm)": c.p_holm,
                    "verdict": "real difference" if c.significant else "not shown",
                    "note": c.note or "",
                }
                for c in comparisons
            ]
        ),
        hide_index=True,
        width="stretch",
        key="bench_tests",
        column_config={
            "mean Δ": st.column_config.NumberColumn(format="%+.3f"),
            "p": st.column_config.NumberColumn(format="%.4f"),
            "p (Holm)": st.column_config.NumberColumn(format="%.4f"),
        },
    )


def cohort_section(run: BenchmarkRun, baseline: str) -> None:
    st.markdown("**Per cohort** (click a column to sort; *open* goes to the cohort drilldown)")
    rows = pd.DataFrame(cohort_rows(run.report, run.library_id, run.run_id, baseline=baseline))
    st.dataframe(
        rows,
        hide_index=True,
        width="stretch",
        key="bench_cohorts_table",
        column_config={
            "drilldown": st.column_config.LinkColumn("drilldown", display_text="open"),
            **{
                c: st.column_config.NumberColumn(c, format="%.3f")
                for c in ("hierarchical", "coverage", "over_inclusion", "precision", "exact_f1")
            },
            "delta_vs_baseline": st.column_config.NumberColumn("Δ vs baseline", format="%+.3f"),
        },
    )
    pairs = [(r.cohort_id, r.method) for r in run.report.results]
    names = {r.cohort_id: r.cohort_name for r in run.report.results}
    cols = st.columns([3, 1])
    cohort, method = cols[0].selectbox(
        "Cohort and method to open",
        pairs,
        key="bench_open_pair",
        format_func=lambda p: f"{p[0]} · {names[p[0]]} · {p[1]}",
    )
    with cols[1]:
        try:
            st.page_link(
                "pages/2_Cohort_drilldown.py",
                label="Open in the drilldown",
                icon=":material/zoom_in:",
                query_params={"library": run.library_id, "cohort": cohort, "method": method, "run": run.run_id},
            )
        except StreamlitAPIException:  # the page runs alone (tests): no page registry
            st.markdown(f"[Open in the drilldown]({drilldown_link(run.library_id, cohort, method, run.run_id)})")
    if run.report.skipped:
        with st.expander(f"{len(run.report.skipped)} skipped cohort/method pairs"):
            st.markdown("\n".join(f"- {plain(s)}" for s in run.report.skipped))


def export_section(run: BenchmarkRun) -> None:
    cols = st.columns(2)
    cols[0].download_button(
        "Download CSV",
        report_csv(run.report),
        file_name=f"benchmark-{run.run_id}.csv",
        mime="text/csv",
        key="bench_csv",
    )
    meta = {
        "run_id": run.run_id,
        "library_id": run.library_id,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "vocabulary_release": run.vocabulary_release,
    }
    cols[1].download_button(
        "Download JSON",
        report_json(run.report, run.parameters, meta),
        file_name=f"benchmark-{run.run_id}.json",
        mime="application/json",
        key="bench_json",
    )


def saved_runs_section() -> None:
    runs = app_state.list_benchmark_runs()
    st.subheader("Saved runs")
    if not runs:
        st.caption("Every run is saved here and survives restarts.")
        return
    labels = {
        r.run_id: (
            f"{r.finished_at} · {r.library_id} · {', '.join(r.parameters.methods)} · "
            f"k={r.parameters.k} · w={r.parameters.dense_weight}" + (f" · {r.label}" if r.label else "")
        )
        for r in runs
    }
    ids = list(labels)

    def reopen() -> None:
        st.session_state["bench_run_id"] = st.session_state["bench_reopen"]

    st.selectbox(
        "Reopen a run",
        [None, *ids],
        format_func=lambda i: "—" if i is None else labels[i],
        key="bench_reopen",
        on_change=reopen,
    )
    compare = st.multiselect("Compare runs", ids, default=[], format_func=labels.get, key="bench_compare")
    if len(compare) >= 1:
        rows = app_state.compare_benchmark_runs(compare)
        frame = pd.DataFrame([r.model_dump() for r in rows])
        st.dataframe(frame, hide_index=True, width="stretch", key="bench_compare_table")
        figure = go.Figure()
        for run_id in compare:
            part = frame[frame["run_id"] == run_id]
            figure.add_bar(
                name=chart_text(labels[run_id][:60]),
                x=[chart_text(m) for m in part["method"]],
                y=part["mean_hierarchical"],
            )
        figure.update_layout(
            barmode="group",
            title="Mean hierarchical score per run",
            yaxis={"range": [0, 1]},
            height=340,
            margin={"t": 50, "b": 30},
        )
        st.plotly_chart(figure, width="stretch", key="bench_compare_chart")


def main() -> None:
    ui.page_header(
        "Benchmark",
        "Each method's codes for a cohort's name, scored against the "
        "cohort's curated codes with ontology-aware partial credit.",
    )
    ui.require_vocabulary()
    libraries = ui.require_libraries()
    ui.dense_notice()
    library, parameters, label, submitted = controls(libraries)
    if submitted:
        run_now(library, parameters, label)
    upload_section(library)
    run_id = st.session_state.get("bench_run_id")
    if run_id:
        run = saved_run(run_id)
        st.subheader(f"Run {run.run_id}")
        st.caption(
            f"{plain(run.library_id)} · {len(run.parameters.cohort_ids)} cohorts · methods "
            f"{plain(', '.join(run.parameters.methods))} · k={run.parameters.k} · dense weight "
            f"{run.parameters.dense_weight} · {run.started_at} → {run.finished_at} · "
            f"vocabulary {run.vocabulary_release}"
        )
        methods = list(dict.fromkeys(r.method for r in run.report.results))
        if not methods:
            st.warning("This run scored nothing: " + plain("; ".join(run.report.skipped[:5])))
        else:
            baseline = st.selectbox("Baseline method", methods, key="bench_baseline")
            summary_section(run, baseline, libraries)
            tests_section(run, baseline)
            cohort_section(run, baseline)
            export_section(run)
    saved_runs_section()


ui.run_page(main)

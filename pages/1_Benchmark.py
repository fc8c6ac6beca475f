"""Benchmark: run methods over a library's cohorts live, compare them honestly, keep every run."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots
from streamlit.errors import StreamlitAPIException

import dashboard_ui as ui
from phenoforge import app_state
from phenoforge.app_state import BenchmarkParameters
from phenoforge.dashboard.benchmark import (
    SHORT_LABELS,
    TABLE_MEASURES,
    BenchmarkRun,
    available_methods,
    best_cells,
    cohort_rows,
    coverage_precision_chart,
    default_methods,
    drilldown_link,
    expert_agreement_lines,
    expert_agreement_text,
    held_out_view,
    import_run_and_save,
    interval_table,
    method_flags,
    method_help,
    progress_text,
    report_csv,
    report_json,
    run_and_save,
    saved_run,
    significance,
    significance_rows,
    summary_notes,
    summary_rows,
    summary_table,
    user_methods_enabled,
)
from phenoforge.dashboard.markdown import chart_text, plain
from phenoforge.errors import PhenoforgeError


def controls(libraries: list) -> tuple[object, BenchmarkParameters, str, bool]:
    dense_ready = ui.dense_retriever() is not None
    library = ui.library_picker(libraries, key="bench_library")
    builders_ready = ui.builders_ready(library)
    ui.builders_notice(ready=builders_ready)
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
        options = available_methods(dense_ready, builders_ready)
        default = default_methods(options)
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
                available_methods(ui.dense_retriever() is not None, ui.builders_ready(library)),  # type: ignore[arg-type]
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


def highlight(table: pd.DataFrame, cells: list[tuple[int, str]]) -> pd.DataFrame:
    """Styler CSS for the best cells: shading, so the best of each measure shows at a glance."""
    css = pd.DataFrame("", index=table.index, columns=table.columns)
    for row, column in cells:
        css.loc[row, column] = "background-color: #d7f0dd; font-weight: 600"
    return css


def held_out_section(run: BenchmarkRun) -> None:
    """The near-copy guard: how many bundled cohorts were held out of what scored this library, which pairs, why."""
    view = held_out_view(run.report)
    if view is None:
        return
    text = f"Near-copy guard ({plain(', '.join(view.methods))}): {plain(view.summary)}"
    (st.warning if view.whole_groups else st.info)(text)
    if view.rows:
        with st.expander(f"Held-out pairs ({len(view.rows)})"):
            st.dataframe(pd.DataFrame(view.rows), hide_index=True, width="stretch", key="bench_held_out")


def summary_section(run: BenchmarkRun, baseline: str, libraries: list) -> None:
    cols = st.columns([1, 1, 2])
    measures: list[str] = list(TABLE_MEASURES)
    sort_by = str(cols[0].selectbox("Sort by", measures, format_func=lambda m: SHORT_LABELS[m], key="bench_sort_by"))
    rows = summary_rows(run.report, baseline, sort_by)
    with ui.cursor() as con:
        line = expert_agreement_lines(con, libraries).get(run.library_id)
    flags = method_flags(run.report)
    degraded = [f"- {plain(method)}: {plain(flag)}" for method, flag in flags.items() if flag.startswith("degraded")]
    if degraded:
        st.warning("\n".join(degraded))
    for method, flag in flags.items():
        if not flag.startswith("degraded"):
            st.caption(f"{plain(method)}: {plain(flag)}")
    held_out_section(run)
    st.markdown(
        f"**Methods, best first by {SHORT_LABELS[sort_by].lower()}**, means over "
        f"{max(row.n_cohorts for row in rows)} cohorts (★ best on it; every measure: higher is better; "
        f"the difference to {plain(baseline)} is paired over cohorts with a 95% CI and a Holm-corrected "
        "permutation test)"
    )
    table = pd.DataFrame(summary_table(rows, baseline, sort_by))
    styled = table.style.format({SHORT_LABELS[m]: "{:.3f}" for m in TABLE_MEASURES}).apply(
        lambda _frame: highlight(table, best_cells(rows)), axis=None
    )
    st.dataframe(
        styled,
        hide_index=True,
        width="stretch",
        key="bench_summary",
        column_config={
            "method": st.column_config.TextColumn("method", width=150),
            **{SHORT_LABELS[m]: st.column_config.NumberColumn(SHORT_LABELS[m], width=80) for m in TABLE_MEASURES},
        },
    )
    st.caption("Shaded: the best value of each measure. " + " ".join(plain(note) for note in summary_notes(rows)))
    with st.expander("95% bootstrap intervals of each mean"):
        st.dataframe(pd.DataFrame(interval_table(rows)), hide_index=True, width="stretch", key="bench_intervals")
    if line is not None:
        st.info(plain(expert_agreement_text(line, rows)))
    figure = make_subplots(
        rows=1, cols=len(TABLE_MEASURES), shared_yaxes=True, subplot_titles=[SHORT_LABELS[m] for m in TABLE_MEASURES]
    )
    order = [row.method for row in reversed(rows)]  # best at the top
    by_method = {row.method: row for row in rows}
    for index, m in enumerate(TABLE_MEASURES, start=1):
        means = [by_method[name].means[m] for name in order]
        figure.add_bar(
            x=means,
            y=[chart_text(name) for name in order],
            orientation="h",
            showlegend=False,
            marker_color="#4c78a8",
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [by_method[n].cis[m][1] - v for n, v in zip(order, means, strict=True)],
                "arrayminus": [v - by_method[n].cis[m][0] for n, v in zip(order, means, strict=True)],
            },
            row=1,
            col=index,
        )
        expert = {"hierarchical": "mean_hierarchical_score", "exact_f1": "mean_exact_f1"}.get(m)
        if line is not None and expert:
            figure.add_vline(x=getattr(line, expert), line_dash="dash", line_color="#444", row=1, col=index)
    figure.update_xaxes(range=[0, 1])
    figure.update_layout(
        height=120 + 28 * len(rows),
        margin={"t": 40, "b": 20, "l": 10, "r": 10},
        title=None,
    )
    st.markdown("**Means per method, 95% bootstrap intervals** (higher is better on each; dashed: expert agreement)")
    st.plotly_chart(figure, width="stretch", key="bench_bars", config={"displayModeBar": False})
    st.altair_chart(coverage_precision_chart(run.report), key="bench_scatter")
    with st.expander(f"Paired permutation tests against {plain(baseline)} (detail)"):
        tests_section(run, baseline, sort_by)


def tests_section(run: BenchmarkRun, baseline: str, sort_by: str) -> None:
    comparisons = significance(run.report, baseline, sort_by)
    if not comparisons:
        st.caption("Add another method to compare it with the baseline.")
        return
    st.caption(f"{SHORT_LABELS[sort_by]}, per cohort; Holm-corrected across the methods.")
    st.dataframe(
        pd.DataFrame(significance_rows(comparisons)),
        hide_index=True,
        width="stretch",
        key="bench_tests",
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
            "drilldown": st.column_config.LinkColumn("drilldown", display_text="open", width=60),
            "cohort": st.column_config.TextColumn("cohort", width=170),
            "method": st.column_config.TextColumn("method", width=130),
            "codes": st.column_config.TextColumn("codes", width=70, help="listed by the method / curated"),
            **{
                c: st.column_config.NumberColumn(c, format="%.3f", width=70)
                for c in ("hierarchical", "coverage", "precision", "exact F1")
            },
            "vs baseline": st.column_config.NumberColumn(f"vs {baseline}", format="%+.3f", width=70),
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
        if r.complete
        else f"{r.started_at} · {r.library_id} · unfinished: {r.n_results} results stored (stopped, or still running)"
        for r in runs
    }
    ids = list(labels)
    finished = [r.run_id for r in runs if r.complete]

    def reopen() -> None:
        st.session_state["bench_run_id"] = st.session_state["bench_reopen"]

    st.selectbox(
        "Reopen a run",
        [None, *ids],
        format_func=lambda i: "—" if i is None else labels[i],
        key="bench_reopen",
        on_change=reopen,
    )
    compare = st.multiselect("Compare runs", finished, default=[], format_func=labels.get, key="bench_compare")
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
        try:
            run = saved_run(run_id)
        except app_state.UnfinishedRunError as error:  # its writer stopped partway: said, not shown as a report
            st.warning(str(error))
            return
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
            cohort_section(run, baseline)
            export_section(run)
    saved_runs_section()


ui.run_page(main)

"""Cohort drilldown: one cohort, one or more methods, every code and why it scored as it did."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import dashboard_ui as ui
from phenoforge.dashboard.benchmark import available_methods, saved_run
from phenoforge.dashboard.drilldown import (
    code_table,
    cohort_drilldown,
    distance_bins,
    hierarchy_nodes,
    outcome_counts,
    outcome_sentence,
    provenance_table,
)
from phenoforge.dashboard.drilldown_source import deep_link_notices, method_means, results_for
from phenoforge.dashboard.markdown import plain
from phenoforge.dashboard.wording import delta_text
from phenoforge.errors import PhenoforgeError


def first(value: str | None, options: list[str]) -> int:
    return options.index(value) if value in options else 0


def main() -> None:
    ui.page_header(
        "Cohort drilldown",
        "Predicted vs curated codes, side by side, with the nearest "
        "match on the other side and the partial credit it earns.",
    )
    ui.require_vocabulary()
    libraries = ui.require_libraries()
    params = st.query_params
    run_id = params.get("run")
    run = None
    if run_id:
        try:
            run = saved_run(run_id)
        except PhenoforgeError as error:
            st.warning(f"{plain(error)}; showing a live run instead.")
    library = ui.library_picker(
        libraries, key="dd_library", default_id=run.library_id if run else params.get("library")
    )
    entries = library.manifest.cohorts
    names = {e.cohort_id: e.cohort_name for e in entries}
    ids = list(names)
    cohort_id = st.selectbox(
        "Cohort",
        ids,
        index=first(params.get("cohort"), ids),
        format_func=lambda c: f"{c} · {names[c]}",
        key=f"dd_cohort_{library.library_id}",
    )
    for notice in deep_link_notices(
        run.library_id if run else params.get("library"),
        library.library_id,
        [lib.library_id for lib in libraries],
        params.get("cohort"),
        cohort_id,
        ids,
    ):
        st.warning(notice)  # deep_link_notices escapes what the link supplied
    dense = ui.dense_retriever()
    options = (
        list(run.parameters.methods)
        if run and run.library_id == library.library_id
        else available_methods(dense is not None, ui.builders_ready(library))
    )
    wanted = [m for m in (params.get("method") or "").split(",") if m in options]
    if not (run and run.library_id == library.library_id):
        ui.builders_notice(ready=ui.builders_ready(library))
    methods = st.multiselect("Methods", options, default=wanted or options[:1], key="dd_methods")
    use_run = run is not None and run.library_id == library.library_id
    if use_run:
        k, weight = run.parameters.k, run.parameters.dense_weight
        st.caption(f"From saved run {run.run_id} (k={k}, dense weight {weight}).")
    else:
        cols = st.columns(2)
        k = int(cols[0].number_input("k", 1, 200, 25, key="dd_k"))
        weight = float(cols[1].slider("dense_weight", 0.0, 1.0, 0.5, 0.05, key="dd_weight"))
    # Keep the URL a deep link to what is on screen.
    new_params = {"library": library.library_id, "cohort": cohort_id, "method": ",".join(methods)}
    if use_run:
        new_params["run"] = run.run_id
    if {key: params.get(key) for key in new_params} != new_params or (not use_run and "run" in params):
        st.query_params.from_dict(new_params)
    if not methods:
        st.info("Choose at least one method.")
        return
    with ui.cursor() as con:
        results, skipped = results_for(
            con, library, cohort_id, methods, run if use_run else None, dense=dense, k=k, dense_weight=weight
        )
        for message in skipped:
            st.warning(plain(message))
        means = method_means(library.library_id, run if use_run else None)
        for result in results:
            view = cohort_drilldown(con, result)
            nodes = hierarchy_nodes(con, view)
            method_block(view, nodes, means.get(result.method))


def method_block(view, nodes, mean) -> None:  # type: ignore[no-untyped-def]
    st.subheader(f"{plain(view.cohort_name)} · {plain(view.method)}")
    cols = st.columns(4)

    def delta(value: float, key: str) -> str | None:
        return None if mean is None else delta_text(value - float(mean[key]), "vs mean")

    cols[0].metric("Coverage", f"{view.coverage:.3f}", delta(view.coverage, "coverage"))
    cols[1].metric(
        "Over-inclusion",
        f"{view.over_inclusion:.3f}",
        delta(view.over_inclusion, "over_inclusion"),
        delta_color="inverse",
    )
    cols[2].metric("Hierarchical", f"{view.hierarchical:.3f}", delta(view.hierarchical, "hierarchical"))
    cols[3].metric("Codes listed", sum(1 for row in view.rows if row.status != "curated only"))
    st.caption(outcome_sentence(outcome_counts(view)))
    if mean is None:
        st.caption("Run a benchmark over this whole library to compare with the method's mean.")
    else:
        st.caption(
            f"Method mean over {mean['n_cohorts']} cohorts (run {mean['run_id']}): coverage "
            f"{mean['coverage']:.3f}, over-inclusion {mean['over_inclusion']:.3f}, "
            f"hierarchical {mean['hierarchical']:.3f}."
        )
    st.dataframe(
        pd.DataFrame(code_table(view)),
        hide_index=True,
        width="stretch",
        key=f"dd_codes_{view.method}",
        column_config={  # fixed widths that add up to a 1,280 px window's main column
            "code": st.column_config.TextColumn("code", width=80),
            "name": st.column_config.TextColumn("name", width=250),
            "in": st.column_config.TextColumn("in", width=80, help="both lists, or only the predicted or curated one"),
            "outcome": st.column_config.TextColumn("outcome", width=170),
            "credit": st.column_config.NumberColumn("credit", format="%.3f", width=60),
            "why in the list": st.column_config.TextColumn("why in the list", width=140),
        },
    )
    with st.expander("Best matches, tree distances and full provenance"):
        st.dataframe(
            pd.DataFrame(provenance_table(view)), hide_index=True, width="stretch", key=f"dd_detail_{view.method}"
        )
    left, right = st.columns(2)
    bins = distance_bins(view)
    hist = go.Figure()
    for direction, counts in bins.counts.items():
        hist.add_bar(name=direction, x=bins.x, y=counts)
    hist.update_layout(
        title="Tree distance to the nearest match",
        barmode="group",
        xaxis={
            "title": "edges (0 = exact)",
            "tickmode": "array",
            "tickvals": bins.x,
            "ticktext": [t.replace("no common ancestor", "no common<br>ancestor") for t in bins.ticktext],
            "ticklabeloverflow": "allow",  # the last label is wide; shown in full, not hidden at the edge
            "range": [-0.6, bins.x[-1] + 1.2],
        },
        yaxis={"title": "codes"},
        height=360,
        margin={"t": 50, "b": 60, "r": 40},
        legend={"orientation": "h", "y": -0.35},
    )
    left.plotly_chart(hist, width="stretch", key=f"dd_hist_{view.method}", config={"displayModeBar": False})
    sunburst = go.Figure(
        go.Sunburst(
            ids=nodes.ids,
            labels=nodes.labels,
            parents=nodes.parents,
            values=nodes.values,
            marker={"colors": nodes.colors},
            hovertext=nodes.hover,
            branchvalues="remainder",
            hoverinfo="label+text",
        )
    )
    sunburst.update_layout(
        title="Where the codes sit: chapter › block › category › code",
        height=420,
        margin={"t": 50, "b": 10, "l": 10, "r": 10},
    )
    right.caption("Green: hit; amber: near miss; red: miss; purple: over-inclusion.")
    right.plotly_chart(sunburst, width="stretch", key=f"dd_sunburst_{view.method}", config={"displayModeBar": False})


ui.run_page(main)

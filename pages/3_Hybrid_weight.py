"""Hybrid weight: slide dense_weight and watch every cohort re-score, with no re-query; or sweep a set builder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import dashboard_ui as ui
from phenoforge.dashboard.markdown import plain
from phenoforge.dashboard.weights import (
    CURVE_WEIGHTS,
    SWEEP_WEIGHTS,
    WeightScorer,
    cohort_shifts,
    collect,
    gaining_and_losing,
    means,
    readable_note,
    run_sweep,
    scorer_key,
    sweep_key,
    sweep_rows,
)
from phenoforge.dashboard.wording import delta_text
from phenoforge.eval.sweep import LibrarySweep, sweepable

REFERENCE_WEIGHT = 0.0


def not_scored(skipped: list[str], scored: int) -> bool:
    """Name the cohorts that cannot be scored; True when none of the chosen ones can (nothing to show)."""
    if not scored:
        st.warning(
            "None of the chosen cohorts can be scored" + "".join(f"\n- {plain(line)}" for line in skipped),
            icon=":material/block:",
        )
        return True
    if skipped:
        with st.expander(f"{len(skipped)} cohort(s) not scored (the means leave them out)"):
            st.markdown("\n".join(f"- {plain(line)}" for line in skipped))
    return False


def scorer_for(library, cohort_ids: list[str], k: int, dense) -> WeightScorer:  # type: ignore[no-untyped-def]
    """Rankings per (build, library, cohorts, k), collected once per process with progress."""
    registry = ui.shared_registry()
    with ui.cursor() as con:
        key = scorer_key(con, Path(library.path), cohort_ids, k, dense)
        scorer = registry.get(key)
        if scorer is None:
            bar = st.progress(0.0, text="querying BM25 and dense once per cohort")
            cache = collect(
                con, Path(library.path), cohort_ids, dense, k=k, progress=ui.progress_callback(bar, "rankings ")
            )
            scorer = WeightScorer(cache, k=k)
            scorer.curve(con)
            registry[key] = scorer
            bar.empty()
    return scorer


@st.fragment
def slider_view(scorer: WeightScorer) -> None:
    weight = st.slider("dense_weight (0 = BM25 only, 1 = dense only)", 0.0, 1.0, 0.5, 0.01, key="hw_weight")
    with ui.cursor() as con:
        report = scorer.report(con, weight)
        reference = scorer.report(con, REFERENCE_WEIGHT)
        curve = scorer.curve(con)
    if not_scored(report.skipped, len(report.results)):
        return
    current = means(report)
    base = means(reference)
    cols = st.columns(3)
    cols[0].metric(
        "Mean hierarchical",
        f"{current['hierarchical']:.3f}",
        delta_text(current["hierarchical"] - base["hierarchical"], "vs BM25 only"),
    )
    cols[1].metric(
        "Mean coverage",
        f"{current['coverage']:.3f}",
        delta_text(current["coverage"] - base["coverage"], "vs BM25 only"),
    )
    precision, base_precision = 1.0 - current["over_inclusion"], 1.0 - base["over_inclusion"]
    cols[2].metric("Mean precision", f"{precision:.3f}", delta_text(precision - base_precision, "vs BM25 only"))
    figure = go.Figure()
    figure.add_scatter(
        x=[w for w, _ in curve], y=[s for _, s in curve], mode="lines+markers", name="mean hierarchical score"
    )
    figure.add_scatter(
        x=[weight],
        y=[current["hierarchical"]],
        mode="markers",
        marker={"size": 16, "color": "#c0392b", "symbol": "diamond"},
        name=f"current ({weight:.2f})",
    )
    best_w, best_s = max(curve, key=lambda point: point[1])
    figure.update_layout(
        title=f"Hierarchical score vs dense weight (best on the grid: {best_s:.3f} at {best_w:.2f})",
        xaxis={"title": "dense_weight"},
        yaxis={"title": "mean hierarchical score"},
        height=380,
        margin={"t": 50, "b": 30},
    )
    st.plotly_chart(figure, width="stretch", key="hw_curve", config={"displayModeBar": False})
    left, right = st.columns(2)
    columns = {
        "cohort_id": "cohort",
        "cohort_name": "name",
        "reference": "BM25 only",
        "current": f"at {weight:.2f}",
        "delta": "Δ",
    }
    number = [c for c in columns.values() if c not in ("cohort", "name")]
    gaining, losing = gaining_and_losing(cohort_shifts(reference, report))
    for column, title, shifts in ((left, "Cohorts gaining most", gaining), (right, "Cohorts losing most", losing)):
        part = pd.DataFrame(
            [{**s.model_dump(), "cohort_name": plain(s.cohort_name)} for s in shifts],  # st.table renders Markdown
            columns=list(columns),
        ).rename(columns=columns)
        column.markdown(f"**{title}** (vs BM25 only)")
        if part.empty:
            column.caption("none at this weight")
        else:
            # A static table: re-rendered on every slider step, and cheaper than a data grid.
            column.table(part.style.format({c: "{:.3f}" for c in number}).hide(axis="index"))


def builder_sweep(library, cohort_ids: list[str], method: str, n_folds: int, dense) -> LibrarySweep | None:  # type: ignore[no-untyped-def]
    """A set builder's sweep per (build, library, cohorts, weights, folds), run on demand with progress."""
    weights = st.multiselect(
        "dense_weight values to sweep", list(CURVE_WEIGHTS), default=list(SWEEP_WEIGHTS), key="hw_sweep_weights"
    )
    if not weights:
        st.info("Choose at least one weight to sweep.")
        return None
    registry = ui.shared_registry()
    with ui.cursor() as con:
        key = sweep_key(con, Path(library.path), method, cohort_ids, sorted(weights), n_folds, dense)
        swept = registry.get(key)
        if swept is not None:
            return swept
        st.caption(
            f"{method} rebuilds every cohort's set at each weight (fitting its builders first when no fitted "
            "bundle is saved): on a large library this takes minutes."
        )
        if not st.button(f"Sweep {method}", key="hw_run_sweep", type="primary"):
            return None
        bar = st.progress(0.0, text=f"sweeping {method}")
        swept = run_sweep(
            con, Path(library.path), method, cohort_ids, weights, dense, n_folds, ui.progress_callback(bar)
        )
        registry[key] = swept
        bar.empty()
    return swept


def sweep_view(swept: LibrarySweep) -> None:
    """In-sample best beside the cross-validated choice, then every weight's means, as the CLI prints them."""
    if swept.trained_on is not None:
        st.caption(
            f"{swept.method}: its own parameters stay as fitted leave-one-library-group-out, on "
            f"{', '.join(swept.trained_on) or 'nothing (untuned defaults)'}."
        )
    for note in swept.notes:
        st.caption(plain(readable_note(note)))
    if not_scored(swept.skipped, len(swept.rows)):
        return
    choice = swept.choice
    if choice is None:
        st.info("Cross-validation needs at least two weights and two scored cohorts.")
    else:
        left, right = st.columns(2)
        left.metric("In-sample best hierarchical", f"{choice.in_sample_score:.3f}")
        left.caption(
            f"dense_weight={choice.in_sample_choice:.2f}, chosen and scored on the same "
            f"{choice.n_cohorts} cohorts (optimistic)"
        )
        right.metric(
            "Cross-validated hierarchical",
            f"{choice.out_of_sample_score:.3f}",
            delta_text(choice.out_of_sample_score - choice.in_sample_score, "vs in-sample"),
        )
        right.caption(
            f"{choice.n_folds} folds: chosen on the other folds, scored on the held-out one; choices "
            f"{', '.join(f'{c:.2f}' for c in choice.choices_per_fold)}"
        )
    rows = pd.DataFrame(sweep_rows(swept))
    figure = go.Figure()
    figure.add_scatter(x=rows["dense_weight"], y=rows["hierarchical"], mode="lines+markers", name="hierarchical")
    figure.update_layout(
        title=f"{swept.method}: mean hierarchical score vs dense weight",
        xaxis={"title": "dense_weight"},
        yaxis={"title": "mean hierarchical score"},
        height=340,
        margin={"t": 50, "b": 30},
    )
    st.plotly_chart(figure, width="stretch", key="hw_sweep_curve", config={"displayModeBar": False})
    st.dataframe(
        rows.style.format({c: "{:.3f}" for c in ("coverage", "precision", "hierarchical")}).format(
            {"dense_weight": "{:.2f}"}
        ),
        hide_index=True,
        width="stretch",
    )


def main() -> None:
    ui.page_header(
        "Hybrid weight",
        "Per-retriever rankings are queried once; the slider re-fuses them (weighted RRF) and re-scores every cohort.",
    )
    ui.require_vocabulary()
    libraries = ui.require_libraries()
    dense = ui.dense_retriever()
    if dense is None:
        ui.dense_notice()
        st.info("The slider needs the dense index: without it every weight is BM25 alone.")
        return
    ready = ui.builders_ready(every=True)  # the method is chosen before the library
    if not ready:
        ui.builders_notice("set-builder sweeps")
    method = st.selectbox(
        "Method",
        [name for name in sweepable() if ready or name == "hybrid"],
        key="hw_method",
        help="hybrid re-fuses cached rankings as the slider moves; a set builder is swept on a grid of weights",
    )
    if method != "hybrid":
        st.caption(f"Swept: {sweepable()[method]}.")
    library = ui.library_picker(libraries, key="hw_library")
    names = {e.cohort_id: e.cohort_name for e in library.manifest.cohorts}
    cols = st.columns([3, 1])
    chosen = cols[0].multiselect(
        "Cohorts (leave empty for all)",
        list(names),
        default=[],
        format_func=lambda c: f"{c} · {names[c]}",
        key=f"hw_cohorts_{library.library_id}",
    )
    if method != "hybrid":
        n_folds = int(cols[1].number_input("cross-validation folds", 2, 20, 5, key="hw_folds"))
        swept = builder_sweep(library, chosen or list(names), method, n_folds, dense)
        if swept is not None:
            sweep_view(swept)
        return
    k = int(cols[1].number_input("k", 1, 100, 25, key="hw_k"))
    scorer = scorer_for(library, chosen or list(names), k, dense)
    slider_view(scorer)


ui.run_page(main)

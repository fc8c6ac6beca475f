"""Explore: search the vocabulary three ways side by side, and look a code up in full."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import dashboard_ui as ui
from phenoforge.agent.lay_terms import spell_out_for_search
from phenoforge.dashboard.explore import (
    EMPTY_QUERY_HINT,
    code_details,
    search_side_by_side,
    support_threshold,
    support_warning,
)
from phenoforge.dashboard.markdown import plain


def search_section() -> None:
    st.subheader("Search")
    dense = ui.dense_retriever()
    cols = st.columns([4, 1, 1])
    query = cols[0].text_input(
        "Query",
        value=st.query_params.get("q", ""),
        key="ex_query",
        placeholder="e.g. type 2 diabetes with kidney disease",
    )
    k = int(cols[1].number_input("k", 1, 50, 10, key="ex_k"))
    weight = float(cols[2].slider("dense_weight", 0.0, 1.0, 0.5, 0.05, key="ex_weight"))
    if not query.strip():
        st.info(EMPTY_QUERY_HINT)
        return
    results = None
    with ui.cursor() as con:
        query, notes = spell_out_for_search(con, query)
        results = search_side_by_side(con, query, ["bm25", "dense", "hybrid"], k=k, dense=dense, dense_weight=weight)
    for note in notes:
        st.caption(plain(note))
    warning = support_warning(results, support_threshold())
    if warning:
        st.warning(warning, icon=":material/help:")
    columns = st.columns(len(results))
    for column, (method, result) in zip(columns, results.items(), strict=True):
        column.markdown(f"**{method}**" + (" (degraded)" if result.degraded else ""))
        if not result.hits:
            column.info(result.reason or "no results")
            continue
        column.dataframe(
            pd.DataFrame([{"code": h.code, "score": h.score, "name": h.name} for h in result.hits]),  # rank: row order
            hide_index=True,
            width="stretch",
            key=f"ex_{method}",
            column_config={  # three tables side by side in a 1,280 px window; a name's full text shows on hover
                "code": st.column_config.TextColumn(width=70),
                "score": st.column_config.NumberColumn(format="%.3f", width=55),
                "name": st.column_config.TextColumn(width=130),
            },
        )
        for note in result.notes:
            column.caption(note)


def lookup_section() -> None:
    st.subheader("Look a code up")
    code = st.text_input(
        "ICD-10-CM code", value=st.query_params.get("code", ""), key="ex_code", placeholder="e.g. E11.22"
    )
    if not code.strip():
        return
    with ui.cursor() as con:
        details = code_details(con, code, ui.libraries(), ui.cohort_membership())
    if details is None:
        st.warning(
            f"'{plain(code)}' is not a code in the loaded vocabulary. Check the spelling (dots "
            "are optional), or search for it by name above."
        )
        return
    concept = details.concept
    st.markdown(f"### {plain(concept.code)} · {plain(concept.name)}")
    st.caption(
        f"{concept.kind} · {'billable' if concept.billable else 'not billable'} · concept id {concept.concept_id}"
    )
    left, right = st.columns(2)
    left.markdown("**Ancestors** (nearest first)")
    left.dataframe(
        pd.DataFrame([{"code": c.code, "name": c.name, "kind": c.kind} for c in details.ancestors]),
        hide_index=True,
        width="stretch",
        key="ex_ancestors",
    )
    right.markdown(f"**Children** ({len(details.children)})")
    if details.children:
        right.dataframe(
            pd.DataFrame([{"code": c.code, "name": c.name, "billable": c.billable} for c in details.children]),
            hide_index=True,
            width="stretch",
            key="ex_children",
        )
    else:
        right.caption("none: a leaf code")
    left, right = st.columns(2)
    left.markdown(f"**Notes** ({len(details.notes)})")
    if details.notes:
        left.dataframe(
            pd.DataFrame([n.model_dump() for n in details.notes]), hide_index=True, width="stretch", key="ex_notes"
        )
    right.markdown(f"**Cohorts that contain it** ({len(details.cohorts)})")
    if details.cohorts:
        right.dataframe(
            pd.DataFrame([c.model_dump() for c in details.cohorts]), hide_index=True, width="stretch", key="ex_cohorts"
        )


def main() -> None:
    ui.page_header("Explore", "BM25, dense and hybrid retrieval side by side, and a code's place in the hierarchy.")
    ui.require_vocabulary()
    ui.dense_notice()
    search_section()
    lookup_section()


ui.run_page(main)

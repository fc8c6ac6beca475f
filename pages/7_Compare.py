"""Compare: any two code lists (a signed-off version, a curated cohort, a saved run's method, an upload)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import dashboard_ui as ui
from phenoforge.dashboard import compare as views
from phenoforge.dashboard.markdown import plain
from phenoforge.lists import sources, store
from phenoforge.lists.sources import CodeList


def pick_version(container: st.delta_generator.DeltaGenerator, key: str) -> CodeList | None:
    lists = store.list_ids()
    if not lists:
        container.info("No signed-off version yet: save one from the Assemble page.")
        return None
    list_id = container.selectbox("List", lists, key=f"{key}_list")
    numbers = list(reversed(store.version_numbers(list_id)))
    number = container.selectbox("Version", numbers, key=f"{key}_version_{list_id}")
    return sources.version_list(f"{list_id}@{number}")


def pick_cohort(container: st.delta_generator.DeltaGenerator, key: str) -> CodeList | None:
    libraries = ui.libraries()
    if not libraries:
        container.info("No cohort library is installed.")
        return None
    library = ui.library_picker(libraries, f"{key}_library", container=container)
    cohorts = {entry.cohort_id: entry.cohort_name for entry in library.manifest.cohorts}
    cohort = container.selectbox(
        "Cohort", list(cohorts), format_func=lambda c: f"{c} · {cohorts[c]}", key=f"{key}_cohort_{library.library_id}"
    )
    with ui.cursor() as con:
        return sources.cohort_list(con, library.library_id, cohort)


def pick_run(container: st.delta_generator.DeltaGenerator, key: str) -> CodeList | None:
    runs = sources.saved_run_choices()
    if not runs:
        container.info("No saved benchmark run: run one on the Benchmark page.")
        return None
    labels = {run.run_id: run.label for run in runs}
    run_id = container.selectbox("Saved run", list(labels), format_func=labels.get, key=f"{key}_run")
    run = next(run for run in runs if run.run_id == run_id)
    method = container.selectbox("Method", run.methods, key=f"{key}_method_{run_id}")
    cohort = container.selectbox("Cohort", run.cohorts, key=f"{key}_runcohort_{run_id}")
    return sources.run_list(f"{run_id}/{method}/{cohort}")


def pick_upload(container: st.delta_generator.DeltaGenerator, key: str) -> CodeList | None:
    upload = container.file_uploader(
        "CSV with a 'code' column, or one code per line", type=["csv", "txt"], key=f"{key}_upload"
    )
    if upload is None:
        return None
    return sources.read_upload(upload.name, upload.getvalue())


PICKERS = dict(zip(views.SOURCES, (pick_version, pick_cohort, pick_run, pick_upload), strict=True))


def side(container: st.delta_generator.DeltaGenerator, title: str, key: str, default: int) -> CodeList | None:
    container.markdown(f"**{title}**")
    source = container.radio("Source", views.SOURCES, index=default, key=f"{key}_source", horizontal=True)
    picked = PICKERS[source](container, key)
    if picked is not None:
        container.caption(plain(f"{picked.name}: {len(picked.codes):,} codes. " + " ".join(picked.notes)))
    return picked


def table(
    container: st.delta_generator.DeltaGenerator,
    title: str,
    rows: list[dict[str, object]],
    widths: dict[str, int] | None = None,
    total: int | None = None,
) -> None:
    """A titled table whose columns fit its box at 1,280 px (a long description is cut, not scrolled to); its
    count says how many rows there are when only the first are drawn."""
    container.markdown(f"**{title}** ({views.shown_of(len(rows) if total is None else total)})")
    if rows:
        frame = pd.DataFrame(rows)
        sizes = widths or {"code": 75, "description": 180}
        config = {name: st.column_config.Column(name, width=sizes[name]) for name in frame.columns if name in sizes}
        container.dataframe(frame, hide_index=True, width="stretch", column_config=config)


def main() -> None:
    ui.page_header(
        "Compare",
        "Two code lists side by side: the right one is scored with the left one as ground truth, as the "
        "benchmark scores a method; near misses pair a code with its nearest on the other side by tree distance.",
    )
    ui.require_vocabulary()
    cols = st.columns(2)
    left = side(cols[0], "Left (ground truth)", "cmp_left", 0)
    right = side(cols[1], "Right (scored)", "cmp_right", 1)
    if left is None or right is None:
        st.info("Pick a list on both sides.")
        return
    distance = int(st.number_input("Near misses up to this tree distance", 1, 12, 6, key="cmp_distance"))
    with ui.cursor() as con:
        shown = views.compare_sides(con, left, right, distance)
        if shown.empty:
            st.warning(shown.empty)
            return
        for message in shown.messages:
            st.warning(plain(message))
        result = shown.result
        assert result is not None
        metrics = st.columns(7)
        for column, (label, value) in zip(metrics, views.score_metrics(result), strict=True):
            column.metric(label, value)
        if result.undefined:
            st.info(plain(f"Scores undefined: {result.undefined}."))
        if result.unknown:
            st.caption(plain(views.unknown_caption(result)))
        lists = st.columns(3)
        table(lists[0], "Shared", views.code_rows(con, result.shared), total=len(result.shared))
        table(lists[1], "Only left", views.code_rows(con, result.only_first), total=len(result.only_first))
        table(lists[2], "Only right", views.code_rows(con, result.only_second), total=len(result.only_second))
        for title, misses, rows in (
            ("Near misses, only left", result.near_first, views.near_rows(con, result.near_first, "left", "right")),
            ("Near misses, only right", result.near_second, views.near_rows(con, result.near_second, "right", "left")),
        ):
            widths = dict(zip(rows[0], views.NEAR_WIDTHS, strict=True)) if rows else None
            table(st, title, rows, widths, total=len(misses))


ui.run_page(main)

"""Versions: signed-off code lists, listed, reopened (with what the vocabulary now says), edited as a new version,
diffed and exported."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import dashboard_ui as ui
from phenoforge.dashboard import versions as views
from phenoforge.dashboard.markdown import plain
from phenoforge.lists import store
from phenoforge.lists.export import version_csv, version_fhir_json


def codes_table(rows: list[dict[str, object]]) -> None:
    config = {name: st.column_config.TextColumn(name, width=width) for name, width in views.CODE_COLUMNS.items()}
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", column_config=config)


def edit_section(version: store.ListVersion) -> None:
    latest = views.latest_number(version.list_id)
    with st.expander("Edit as a new version"):
        st.caption(
            f"Version {version.number} is signed off and never changes: your edit is saved as version "
            f"{(latest or 0) + 1}, based on version {version.number}."
        )
        with st.form(f"vs_edit_{version.ref}"):
            remove = st.multiselect("Remove codes", version.code_list, key="vs_remove")
            add = st.text_input("Add codes (separated by spaces or commas)", key="vs_add")
            note = st.text_input("Why (each changed code's reason)", key="vs_note")
            reviewer = st.text_input("Reviewer name", key="vs_reviewer")
            submitted = st.form_submit_button("Save as a new version", type="primary")
        if submitted:
            with ui.cursor() as con:
                result = store.amend(version, con, reviewer, note, views.codes_typed(add), remove, seen=latest)
            st.session_state["vs_saved"] = (result.version.ref, result.notes)
            st.session_state.pop(f"vs_open_{version.list_id}", None)  # open the new version
            st.query_params["list"] = result.version.list_id
            st.query_params["version"] = str(result.version.number)
            st.rerun()


def diff_section(version: store.ListVersion) -> None:
    numbers = store.version_numbers(version.list_id)
    if len(numbers) < 2:
        return
    with st.expander("Compare with another version"):
        others = [n for n in reversed(numbers) if n != version.number]
        other = st.selectbox("Other version", others, key=f"vs_diff_{version.list_id}")
        first, second = sorted([version.number, other])
        try:
            diff = store.diff_versions(
                store.load_version(version.list_id, first), store.load_version(version.list_id, second)
            )
        except store.VersionError as error:
            st.error(plain(str(error)))
            return
        st.markdown(
            f"**{plain(diff.first)} -> {plain(diff.second)}**: {diff.kept} kept, {len(diff.added)} added, "
            f"{len(diff.removed)} removed, {len(diff.changed)} decided otherwise"
        )
        rows = views.diff_rows(diff)
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def releases_section(version: store.ListVersion) -> None:
    with st.expander("Terminology releases: codes added, deleted or retitled since FY2024"):
        with ui.cursor() as con:
            steps = views.release_changes(version, con)
        for changes in steps:
            if not changes.available:
                st.info(plain(changes.unavailable))
                continue
            for message in changes.messages():
                st.markdown(plain(message))
            rows = views.release_rows(changes)
            if rows:
                st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
            else:
                st.caption("None of this list's codes changed between these two releases.")


def unreadable(problems: list[str]) -> None:
    for problem in problems:
        st.error(plain(f"Unreadable, skipped: {problem}"))


def version_section(list_id: str) -> None:
    st.subheader(plain(f"Versions of {list_id}"))
    problems: list[str] = []
    st.dataframe(pd.DataFrame(views.version_rows(list_id, problems)), hide_index=True, width="stretch")
    unreadable(problems)
    numbers = list(reversed(store.version_numbers(list_id)))
    wanted = st.query_params.get("version")
    index = numbers.index(int(wanted)) if wanted and wanted.isdigit() and int(wanted) in numbers else 0
    number = st.selectbox("Open version", numbers, index=index, key=f"vs_open_{list_id}")
    try:
        version = store.load_version(list_id, number)
    except store.VersionError as error:
        st.error(plain(str(error)))  # this version only: the list and the others stay on the page
        return
    for line in views.header(version):
        st.markdown(line)  # escaped by views.header
    if not version.signed_off:
        st.warning(
            plain(f"{version.ref} is not signed off: {version.signature_check.message}. Its FHIR export is a draft.")
        )
    with ui.cursor() as con:
        check = store.check_vocabulary(version, con)
    for message in check.messages():
        (st.warning if check.changed else st.info)(plain(message))
    st.markdown(f"**Codes ({len(version.codes)})**")
    codes_table(views.code_rows(version.codes))
    if version.excluded:
        with st.expander(f"Left out ({len(version.excluded)}: rejected or removed)"):
            codes_table(views.code_rows(version.excluded))
    for note in version.notes:
        st.caption(plain(note))
    cols = st.columns(2)
    cols[0].download_button(
        "Download CSV", version_csv(version), f"{list_id}-v{number}.csv", "text/csv", key="vs_dl_csv"
    )
    cols[1].download_button(
        "Download FHIR ValueSet (JSON)",
        version_fhir_json(version),
        f"{list_id}-v{number}.json",
        "application/fhir+json",
        key="vs_dl_fhir",
    )
    edit_section(version)
    diff_section(version)
    releases_section(version)


def main() -> None:
    ui.page_header(
        "Versions",
        "Signed-off code lists. A version never changes: an edit is a new version, and any two can be compared.",
    )
    ui.require_vocabulary()
    saved = st.session_state.pop("vs_saved", None)
    if saved:
        st.success(plain(f"Saved {saved[0]}."))
        for note in saved[1]:
            st.warning(plain(note))
    problems: list[str] = []
    rows = views.list_rows(problems)
    unreadable(problems)
    if not rows:
        if not problems:
            st.info("No signed-off version yet: assemble a list on the Assemble page and save it as a version.")
        return
    st.subheader(f"Lists ({len(rows)})")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    ids = [row["list"] for row in rows]
    wanted = st.query_params.get("list")
    list_id = st.selectbox("List", ids, index=ids.index(wanted) if wanted in ids else 0, key="vs_list")
    version_section(list_id)


ui.run_page(main)

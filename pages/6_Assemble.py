"""Assemble: description -> seed terms -> curated cohorts first -> a human gate -> a concept set."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import dashboard_ui as ui
from phenoforge.agent import audit, review, workflow
from phenoforge.agent.export import (
    circe_unavailable,
    concept_set_circe_json,
    concept_set_csv,
    concept_set_fhir_json,
)
from phenoforge.agent.state import AssemblyState
from phenoforge.dashboard import assemble as views
from phenoforge.dashboard.markdown import plain
from phenoforge.errors import PhenoforgeError


def _session() -> AssemblyState | None:
    """The open session: from this browser session, else from ?session= (survives a restart)."""
    state = st.session_state.get("as_state")
    if state is None and st.query_params.get("session"):
        wanted = st.query_params["session"]
        try:
            state = workflow.resume(wanted)
        except PhenoforgeError as error:
            st.warning(f"{error}. Start a new session below.")
            st.query_params.clear()
            return None
        st.session_state["as_state"] = state
    return state


def _open(state: AssemblyState) -> None:
    """Make ``state`` the open session; per-code widgets show its decisions on the next run."""
    widgets = ("as_dec_", "as_exp_", "as_pick_", "as_reason_", "as_change_", "as_why")
    for key in [key for key in st.session_state if str(key).startswith(widgets)]:
        del st.session_state[key]
    st.session_state["as_state"] = state
    st.session_state["as_sync"] = True
    st.query_params["session"] = state.session_id


def _sync_widgets(state: AssemblyState) -> None:
    """Write the saved decisions into the review widgets before they are drawn. Deleting a widget's value
    was not enough: the browser kept showing the old choice ("pending" after "Reject all pending")."""
    sync = st.session_state.pop("as_sync", False)
    if sync:  # the last action's reason and the proposal pickers start afresh
        st.session_state["as_why"] = ""
        for index, term in enumerate(state.terms):
            if term.proposals:
                st.session_state[f"as_reason_{index}"] = ""
                st.session_state[f"as_change_{index}"] = False
    for candidate in state.candidates:
        if sync or f"as_dec_{candidate.code}" not in st.session_state:
            st.session_state[f"as_dec_{candidate.code}"] = candidate.decision or views.PENDING
        if candidate.n_descendants and (sync or f"as_exp_{candidate.code}" not in st.session_state):
            st.session_state[f"as_exp_{candidate.code}"] = candidate.expand_descendants


def start_section(reviewer: str) -> None:
    libraries = ui.libraries()
    ready = ui.builders_ready(None)  # a description is built with the fit on every library (fitted first)
    if not ready:
        ui.builders_notice("the set-builder generators")
    with st.form("as_new"):
        description = st.text_area(
            "Population description",
            key="as_description",
            max_chars=workflow.MAX_DESCRIPTION_CHARS,
            placeholder="e.g. adults hospitalized with heart failure and type 2 diabetes",
        )
        cols = st.columns([1, 2, 1])
        options = ["offline", "claude"] if views.claude_available() else ["offline"]
        decomposer = cols[0].radio(
            "Decomposer",
            options,
            key="as_decomposer",
            horizontal=True,
            help=None if len(options) > 1 else "Set ANTHROPIC_API_KEY to use Claude.",
        )
        ids = [lib.library_id for lib in libraries]
        chosen = cols[1].multiselect("Curated libraries to check first", ids, default=ids, key="as_libraries")
        k = int(cols[2].number_input("Hits per term (k)", 1, 50, 10, key="as_k"))
        generator = st.radio(
            "Codes for terms no curated cohort settles",
            [name for name in workflow.generators() if ready or name == "hybrid"],
            key="as_generator",
            horizontal=True,
            help="hybrid: the top k hits; adaptive_cutoff, subtree, learned, curated_transfer: a billable list of "
            "the builder's own size, each code with why it is there (k is not used)",
        )
        submitted = st.form_submit_button("Decompose and search", type="primary", key="as_start")
    if not submitted:
        return
    paths = [lib.path for lib in libraries if lib.library_id in chosen]
    with st.spinner("Decomposing and searching"), ui.cursor() as con:
        state = workflow.start(
            con,
            description,
            views.decomposer_for(decomposer, con, ui.dense_retriever()),
            reviewer=reviewer,
            decomposer_name=decomposer,
            library_paths=paths,
            dense=ui.dense_retriever(),
            k=k,
            generator=generator,
        )
    _open(state)


def resume_section() -> None:
    sessions = audit.list_sessions()
    if not sessions:
        return
    with st.expander(f"Resume a saved session ({len(sessions)})"):
        ids = [s.session_id for s in sessions]
        labels = {s.session_id: f"{s.session_id} · {s.updated_at} · {s.stage} · {s.description[:60]}" for s in sessions}
        picked = st.selectbox("Session", ids, format_func=labels.get, key="as_resume_pick")
        if st.button("Resume", key="as_resume"):
            _open(workflow.resume(picked))
            st.rerun()


def terms_section(state: AssemblyState) -> None:
    st.subheader("Seed terms")
    for note in state.notes:
        st.info(plain(note))
    st.dataframe(pd.DataFrame(views.term_rows(state)), hide_index=True, width="stretch")
    qualifiers_section(state)


def qualifiers_section(state: AssemblyState) -> None:
    if not state.qualifiers:
        return
    with st.container(border=True, key="as_qualifiers"):
        st.markdown(
            "**Not expressed by any ICD-10-CM code: apply these in the cohort's other criteria** "
            "(they are listed in the exports and the audit trail too)"
        )
        st.markdown("\n".join(f"- {plain(q.kind)}: **{plain(q.text)}**" for q in state.qualifiers))


def gate_status_section(state: AssemblyState, reviewer: str) -> None:
    """Why actions are disabled, at the top, before any proposal or candidate row."""
    problems = views.gate_status(state, reviewer)
    if problems:
        st.warning("**Before the list can leave Assemble:**\n" + "\n".join(f"- {plain(p)}" for p in problems))


def proposals_section(state: AssemblyState, reviewer: str) -> None:
    proposed = [(index, term) for index, term in enumerate(state.terms) if term.proposals]
    if not proposed:
        return
    st.subheader("Curated cohorts proposed")
    st.caption(
        "A matching curated cohort is a proposal: confirm it, replace it with another (best-fitting scope first), "
        "or decline it for generated candidates. Your choice and reason go to the audit trail."
    )
    for index, term in proposed:
        with st.container(border=True, key=f"as_prop_{index}"):
            if term.status == "proposed":
                st.markdown(f"**'{plain(term.term)}'**: to confirm or replace")
            else:
                st.markdown(f"**'{plain(term.term)}'**: {plain(term.settled_by or '')} {plain(term.settlement or '')}")
            st.dataframe(pd.DataFrame(views.proposal_rows(term)), hide_index=True, width="stretch")
            if term.status != "proposed" and not st.toggle("Change this choice", key=f"as_change_{index}"):
                continue
            keys = [match.key for match in term.proposals] + [views.DECLINE]
            cols = st.columns([4, 3, 2])
            pick = cols[0].selectbox(
                "Cohort for this term",
                keys,
                format_func=lambda key, term=term: views.proposal_label(term, key),
                key=f"as_pick_{index}",
            )
            reason = cols[1].text_input("Reason (optional, kept in the audit trail)", key=f"as_reason_{index}")
            if cols[2].button(
                views.settle_button_label(term, pick), key=f"as_settle_{index}", type="primary", disabled=not reviewer
            ):
                with st.spinner("Saving"), ui.cursor() as con:
                    new = workflow.settle(
                        state,
                        con,
                        term.term,
                        None if pick == views.DECLINE else pick,
                        reviewer,
                        reason=reason,
                        dense=ui.dense_retriever(),
                    )
                _open(new)
                st.rerun()


def gate_section(state: AssemblyState, reviewer: str) -> None:
    st.subheader(f"Generated candidates ({len(state.pending)} of {len(state.candidates)} pending)")
    if not state.candidates:
        st.caption("Nothing to review: every term matched a curated cohort or found nothing.")
        return
    with ui.cursor() as con:
        found = review.branches(state, con)
        flagged = review.conflicts(state, con, found)
    if flagged:
        st.warning("**Conflicts to look at:**\n" + "\n".join(f"- {plain(text)}" for text in flagged))
    st.dataframe(
        pd.DataFrame(views.branch_rows(found)),
        hide_index=True,
        width="stretch",
        height=min(36 + 35 * len(found), 320),
        key="as_branches",
    )
    by_code = {branch.code: branch for branch in found}
    cols = st.columns([5, 3])
    picked = cols[0].selectbox(
        "Branch to review (block > category, most relevant first)",
        list(by_code),
        format_func=lambda code: by_code[code].label(),
        key="as_branch",
    )
    reason = cols[1].text_input("Reason for the next action (kept in the audit trail and exports)", key="as_why")
    branch = by_code[picked]
    actions = st.columns(4)
    if actions[0].button("Include branch with descendants", key="as_include", type="primary", disabled=not reviewer):
        _open(workflow.decide(state, review.branch_decisions(branch, "accept"), reviewer, reason=reason))
        st.rerun()
    if actions[1].button("Exclude branch", key="as_exclude", disabled=not reviewer):
        _open(workflow.decide(state, review.branch_decisions(branch, "reject"), reviewer, reason=reason))
        st.rerun()
    if actions[2].button("Accept all pending", key="as_accept_all", disabled=not reviewer):
        _open(workflow.decide(state, views.bulk(state, "accept"), reviewer, reason=reason))
        st.rerun()
    if actions[3].button("Reject all pending", key="as_reject_all", disabled=not reviewer):
        _open(workflow.decide(state, views.bulk(state, "reject"), reviewer, reason=reason))
        st.rerun()
    shown = branch.candidates[: views.MAX_ROWS]
    st.caption(
        f"{branch.kind.capitalize()} {plain(branch.code)}: {len(branch.candidates)} candidates, {branch.status}"
        + (
            f"; the first {len(shown)} shown: pick a category to see the rest"
            if len(shown) < len(branch.candidates)
            else ""
        )
        + ". Save code decisions before picking another branch."
    )
    choices: dict[str, tuple[str, bool]] = {}
    for candidate in shown:
        row = st.columns([6, 3, 2])
        row[0].markdown(views.candidate_label(state, candidate.code))
        choice = row[1].radio(  # its value: session state, set from the saved decision by _sync_widgets
            "decision",
            views.CHOICES,
            horizontal=True,
            key=f"as_dec_{candidate.code}",
            label_visibility="collapsed",
        )
        expand = False
        if candidate.n_descendants:
            expand = row[2].checkbox(f"expand to {candidate.n_descendants} descendants", key=f"as_exp_{candidate.code}")
        choices[candidate.code] = (choice, expand)
    changed = views.changed_decisions(state, choices)
    if st.button(f"Save {len(changed)} decisions", key="as_save", type="primary", disabled=not changed or not reviewer):
        _open(workflow.decide(state, changed, reviewer, reason=reason))
        st.rerun()


def result_section(state: AssemblyState, reviewer: str) -> None:
    blocked = views.gate_status(state, reviewer)
    if st.button("Assemble concept set", key="as_assemble", type="primary", disabled=bool(blocked)):
        if reviewer != state.reviewer:
            state = workflow.with_reviewer(state, reviewer)
        with ui.cursor() as con:
            state = workflow.finish(state, con)
        _open(state)
    if blocked:
        st.caption("Assembling waits for: " + "; ".join(plain(problem) for problem in blocked))
    if state.concept_set is None or not state.concept_set.reviewer:  # a set assembled before reviewers were required
        return
    concept_set = state.concept_set
    st.subheader(f"Concept set: {len(concept_set.entries)} codes")
    st.caption(f"Reviewed by {plain(concept_set.reviewer)}")
    if state.pending:
        st.warning(f"{len(state.pending)} candidates are still pending and are not in the set.")
    st.dataframe(pd.DataFrame(views.concept_rows(concept_set)), hide_index=True, width="stretch")
    for item in concept_set.unmappable:
        st.warning(f"Unmappable '{plain(item.term)}': {plain(item.reason)}")
    with ui.cursor() as con:
        circe_problem = circe_unavailable(con)
        circe = concept_set_circe_json(con, concept_set) if circe_problem is None else ""
    cols = st.columns(3)
    if concept_set.entries:
        with ui.cursor() as con:
            fhir = concept_set_fhir_json(con, concept_set, state.session_id)
        cols[2].download_button(
            "Download FHIR ValueSet (JSON)",
            fhir,
            f"value_set_{state.session_id}.json",
            "application/fhir+json",
            key="as_dl_fhir",
        )
    cols[0].download_button(
        "Download CSV", concept_set_csv(concept_set), f"concept_set_{state.session_id}.csv", "text/csv", key="as_dl_csv"
    )
    if circe_problem is None:
        cols[1].download_button(
            "Download Circe concept set (JSON)",
            circe,
            f"concept_set_{state.session_id}.json",
            "application/json",
            key="as_dl_circe",
        )
    else:
        cols[1].caption(f"Circe (OMOP/ATLAS) concept set: not available. {circe_problem}.")


def audit_section(state: AssemblyState) -> None:
    records = audit.decisions(state.session_id)
    with st.expander(f"Audit trail ({len(records)} decisions)"):
        if records:
            st.dataframe(pd.DataFrame([r.model_dump() for r in records]), hide_index=True, width="stretch")
        st.download_button(
            "Download audit trail (CSV)",
            audit.audit_csv(records),
            f"audit_{state.session_id}.csv",
            "text/csv",
            key="as_dl_audit",
        )


def main() -> None:
    ui.page_header(
        "Assemble",
        "Describe a population; seed terms resolve to curated cohorts first, "
        "and every generated code passes your review before it joins the concept set.",
    )
    ui.require_vocabulary()
    state = _session()
    if state is not None and state.reviewer and not st.session_state.get("as_reviewer"):
        st.session_state["as_reviewer"] = state.reviewer  # a resumed session keeps its reviewer
    typed = st.text_input("Reviewer name", key="as_reviewer")
    reviewer = " ".join(typed.split())
    if typed and not reviewer:
        st.error("A reviewer name of only spaces is not a name: type your name; every action is recorded under it.")
    if state is None:
        resume_section()
        start_section(reviewer)
        state = st.session_state.get("as_state")
        if state is None:
            return
    else:
        cols = st.columns([4, 1])
        cols[0].markdown(f"**Session {state.session_id}** · {plain(state.description)} · decomposer {state.decomposer}")
        if cols[1].button("New session", key="as_new_session"):
            st.session_state.pop("as_state", None)
            st.query_params.clear()
            st.rerun()
    _sync_widgets(state)
    gate_status_section(state, reviewer)
    terms_section(state)
    proposals_section(state, reviewer)
    gate_section(state, reviewer)
    result_section(st.session_state.get("as_state", state), reviewer)
    audit_section(state)


ui.run_page(main)


# --- "Save as version": the reviewed list signed off as an immutable version (phenoforge.lists; Versions page) ---


def _sign_off(state: AssemblyState, drawn_list: str, seen: int | None) -> None:
    """The button's callback: name, note and reviewer as typed (read now: typing then clicking at once loses
    nothing); ``seen`` is the latest version of ``drawn_list`` the page showed when the reviewer clicked."""
    from phenoforge.dashboard import versions as version_views

    list_id = str(st.session_state.get("as_vs_list", ""))
    try:
        with ui.cursor() as con:
            result = version_views.save_state(
                state,
                con,
                str(st.session_state.get("as_reviewer", "")),
                list_id,
                str(st.session_state.get("as_vs_note", "")),
                seen if list_id.strip() == drawn_list.strip() else None,  # another list: none of it was seen
                bool(st.session_state.get("as_vs_into", False)),
            )
        st.session_state["as_vs_saved"] = (result.version.ref, result.notes, None)
    except PhenoforgeError as error:
        st.session_state["as_vs_saved"] = (None, [], str(error))


def save_as_version() -> None:
    from phenoforge.dashboard import versions as version_views

    state = st.session_state.get("as_state")
    if state is None or state.concept_set is None:
        return
    st.subheader("Save as version")
    saved, notes, problem = st.session_state.pop("as_vs_saved", (None, [], None))
    if saved:
        st.success(plain(f"Saved {saved}: signed off, it never changes. Open it on the Versions page."))
    if problem:
        st.error(plain(problem))
    for note in notes:
        st.warning(plain(note))
    blocker = version_views.save_blocker(state)
    if blocker:
        st.caption(plain(f"Not yet: {blocker}."))
        return
    reviewer = str(st.session_state.get("as_reviewer", ""))
    cols = st.columns([2, 3, 1])
    list_id = cols[0].text_input("List name", value=version_views.suggested_list_id(state), key="as_vs_list")
    cols[1].text_input("What this version changes (optional)", key="as_vs_note")
    seen = version_views.latest_number(list_id)
    cols[0].caption(
        plain(f"{list_id} has {seen} versions: this is version {seen + 1}") if seen else "the list's first one"
    )
    if seen:
        cols[1].checkbox("Add to this list although it describes another population", key="as_vs_into")
    cols[2].button(
        "Save as version",
        key="as_vs_save",
        type="primary",
        disabled=not reviewer.strip(),
        on_click=_sign_off,
        args=(state, list_id, seen),
    )
    if not reviewer.strip():
        st.caption("Enter your name above (the reviewer) to sign the list off.")


ui.run_page(save_as_version)

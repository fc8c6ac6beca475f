"""The Assemble page through streamlit's AppTest, on the dashboard fixture data."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from streamlit.testing.v1 import AppTest

from phenoforge.agent import audit
from tests.dashboard.conftest import frame_with

PAGE = "pages/6_Assemble.py"


def start(at: AppTest, description: str = "adults with asthma or a femur fracture") -> AppTest:
    at.text_input(key="as_reviewer").input("ann")
    at.text_area(key="as_description").input(description)
    at.button(key="as_start").click().run()
    assert not at.exception, at.exception
    return at


def test_curated_first_then_gate_then_export(app: Callable[[str], AppTest], dash: Path) -> None:
    at = app(PAGE).run()
    assert not at.exception
    assert at.radio(key="as_decomposer").options == ["offline"]
    start(at)
    terms = frame_with(at, "status")
    status = dict(zip(terms["term"], terms["status"], strict=True))
    assert status == {"asthma": "proposed", "femur fracture": "generated"}  # a proposal, not taken yet
    assert "521" in terms.loc[terms["term"] == "asthma", "cohort"].iloc[0]
    # the gate says what it waits for at the top; assembling is disabled until the proposal is settled
    assert any("confirm or replace the curated cohort proposed for \\'asthma\\'" in w.value for w in at.warning)
    assert at.button(key="as_assemble").disabled
    assert any("apply these in the cohort's other criteria" in m.value for m in at.markdown)
    assert any(m.value == "- age or sex: **adults**" for m in at.markdown)  # a qualifier no code expresses
    scope = frame_with(at, "vs the others")
    assert scope["cohort"].iloc[0].startswith("fixture-") or "521" in scope["cohort"].iloc[0]
    assert at.button(key="as_settle_0").label == "Confirm the proposed cohort"
    at.text_input(key="as_reason_0").input("the asthma cohort as proposed")
    at.button(key="as_settle_0").click().run()
    assert not at.exception
    assert at.session_state["as_state"].terms[0].status == "curated"
    # per-code review: accept S72 with its subtree, reject the next candidate
    codes = [key.removeprefix("as_dec_") for key in (r.key for r in at.radio) if key and key.startswith("as_dec_")]
    assert "S72" in codes
    at.radio(key="as_dec_S72").set_value("accept")
    at.checkbox(key="as_exp_S72").check()
    other = next(code for code in codes if code != "S72")
    at.radio(key=f"as_dec_{other}").set_value("reject")
    at.run()
    save = at.button(key="as_save")
    assert save.label == "Save 2 decisions" and not save.disabled
    save.click().run()
    assert not at.exception
    session_id = at.session_state["as_state"].session_id
    trail = [r for r in audit.decisions(session_id) if r.decision in ("accept", "reject")]
    assert {(r.code, r.decision, r.reviewer) for r in trail} == {("S72", "accept", "ann"), (other, "reject", "ann")}
    confirmed = next(r for r in audit.decisions(session_id) if r.decision == "confirm-cohort")
    assert confirmed.reviewer == "ann" and confirmed.reason.endswith("(the asthma cohort as proposed)")
    assert next(r for r in trail if r.code == "S72").expand_descendants is True
    # bulk, then assemble
    at.button(key="as_reject_all").click().run()
    assert not at.session_state["as_state"].pending
    at.button(key="as_assemble").click().run()
    assert not at.exception
    final = frame_with(at, "tier")
    assert set(final["tier"]) == {"curated", "generated"}
    assert any(caption.value == "Reviewed by ann" for caption in at.caption)
    assert {"S72", "S72.001A", "J45.20"} <= set(final["code"])
    assert final.loc[final["code"] == "S72.001A", "via descendants of"].iloc[0] == "S72"
    assert len(final["code"]) == len(set(final["code"]))
    assert {button.key for button in at.download_button} >= {"as_dl_csv", "as_dl_audit"}
    assert "as_dl_circe" not in {button.key for button in at.download_button}  # no OMOP ids in this vocabulary
    assert "as_dl_fhir" in {button.key for button in at.download_button}
    assert any("OMOP concept ids" in caption.value for caption in at.caption)


def test_session_resumes_after_restart(app: Callable[[str], AppTest], dash: Path) -> None:
    at = start(app(PAGE).run())
    at.button(key="as_accept_all").click().run()
    session_id = at.session_state["as_state"].session_id
    n = len(audit.decisions(session_id))
    assert n > 0
    # a new script run with nothing in memory: the ?session= link brings the session back
    again = app(PAGE)
    again.query_params["session"] = session_id
    again.run()
    assert not again.exception
    state = again.session_state["as_state"]
    assert state.session_id == session_id and not state.pending
    assert all(radio.value == "accept" for radio in again.radio if radio.key and radio.key.startswith("as_dec_"))
    assert any(f"Audit trail ({n} decisions)" in expander.label for expander in again.expander)
    assert again.text_input(key="as_reviewer").value == "ann"  # the resumed session keeps its reviewer
    # and from the saved-session list
    fresh = app(PAGE).run()
    assert fresh.selectbox(key="as_resume_pick").value == session_id
    fresh.button(key="as_resume").click().run()
    assert fresh.session_state["as_state"].session_id == session_id


def test_a_proposal_can_be_replaced_or_declined(app: Callable[[str], AppTest], dash: Path) -> None:
    at = start(app(PAGE).run(), "adults with diabetes mellitus")
    state = at.session_state["as_state"]
    term = state.terms[0]
    assert term.status == "proposed" and len(term.proposals) >= 2, [t.status for t in state.terms]
    options = at.selectbox(key="as_pick_0").options
    assert len(options) == len(term.proposals) + 1 and options[-1].startswith("None of these")
    assert options[0].endswith("(proposed)")
    at.selectbox(key="as_pick_0").set_value(term.proposals[1].key).run()
    assert at.button(key="as_settle_0").label == "Use this cohort instead"
    at.button(key="as_settle_0").click().run()
    settled = at.session_state["as_state"].terms[0]
    assert settled.status == "curated" and settled.curated.key == term.proposals[1].key
    assert settled.settlement.startswith("replaced the proposed")
    # change the choice: decline every cohort, review generated candidates instead
    at.toggle(key="as_change_0").set_value(True).run()
    at.selectbox(key="as_pick_0").set_value("__generated__").run()
    at.button(key="as_settle_0").click().run()
    assert not at.exception
    declined = at.session_state["as_state"]
    assert declined.terms[0].status == "generated" and declined.candidates
    kinds = [r.decision for r in audit.decisions(declined.session_id)]
    assert kinds[-2:] == ["replace-cohort", "decline-cohorts"]


def test_decisions_need_a_reviewer(app: Callable[[str], AppTest], dash: Path) -> None:
    at = app(PAGE).run()
    at.text_area(key="as_description").input("adults with a femur fracture")
    at.button(key="as_start").click().run()
    assert at.button(key="as_accept_all").disabled
    assert any("Enter your name" in warning.value for warning in at.warning)  # at the top, above every row
    at.text_input(key="as_reviewer").input("   ").run()
    assert any("only spaces is not a name" in error.value for error in at.error)
    assert at.button(key="as_accept_all").disabled and at.button(key="as_assemble").disabled


def test_missing_vocabulary_points_to_home(app: Callable[[str], AppTest], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path / "empty"))
    at = app(PAGE).run()
    assert not at.exception
    assert any("Open the Home page" in warning.value for warning in at.warning)
    assert not [button for button in at.button if button.key == "as_start"]


def test_unknown_session_link_starts_fresh(app: Callable[[str], AppTest], dash: Path) -> None:
    at = app(PAGE)
    at.query_params["session"] = "no-such-session"
    at.run()
    assert not at.exception
    assert any("no assembly session" in warning.value for warning in at.warning)
    assert at.button(key="as_start") is not None and "as_state" not in at.session_state


def test_blank_description_is_a_message_not_an_exception(app: Callable[[str], AppTest], dash: Path) -> None:
    """Issue 12 item 9: Streamlit's redacted exception box became a message that says what to type."""
    at = app(PAGE).run()
    at.text_input(key="as_reviewer").input("ann")
    at.text_area(key="as_description").input("   ")
    at.button(key="as_start").click().run()
    assert not at.exception
    assert any("describe the population" in error.value for error in at.error)
    assert "as_state" not in at.session_state and audit.list_sessions() == []


def test_session_description_is_shown_as_text_not_markdown(app: Callable[[str], AppTest], dash: Path) -> None:
    """Issue 12 item 4 (the browser test checks the rendered page): the Markdown source is escaped."""
    at = app(PAGE).run()
    start(at, "adults with **asthma** ![](http://127.0.0.1:9/pixel.png)").run()  # the header shows once open
    header = next(m.value for m in at.markdown if m.value.startswith("**Session "))
    assert "\\*\\*asthma\\*\\*" in header and "\\!\\[\\]\\(http" in header  # escaped, the URL broken (plain())
    assert "**asthma**" not in header and "![](" not in header


def test_review_by_branch_with_a_reason_and_conflicts_flagged(app: Callable[[str], AppTest], dash: Path) -> None:
    at = start(app(PAGE).run(), "adults with a femur fracture")
    overview = frame_with(at, "included")
    assert overview["level"].iloc[0] == "block" and overview["pending"].iloc[0] > 0
    branches = at.selectbox(key="as_branch").options
    assert branches[0].startswith("S70-S79")  # the most relevant block first, its categories under it
    at.text_input(key="as_why").input("hip fractures are the population")
    at.button(key="as_include").click().run()
    assert not at.exception
    state = at.session_state["as_state"]
    assert all(c.decision == "accept" and c.reason == "hip fractures are the population" for c in state.candidates
               if c.code.startswith("S7"))  # fmt: skip
    assert all(radio.value == "accept" for radio in at.radio if radio.key and radio.key.startswith("as_dec_S7"))
    inner = next(c.code for c in state.candidates if c.code.startswith("S72.") and c.n_descendants == 0)
    at.radio(key=f"as_dec_{inner}").set_value("reject").run()
    at.button(key="as_save").click().run()
    assert any("enters the set anyway" in warning.value for warning in at.warning)  # flagged above the rows
    assert any("partly included" in warning.value for warning in at.warning)

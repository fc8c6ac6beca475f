"""The Assemble gate in a real browser: description -> curated proposal replaced -> candidates reviewed ->
reviewer named -> concept set exported, with the qualifiers no ICD-10-CM code expresses shown throughout.

Nothing can leave without a named reviewer: before a name is typed the page says so at the top and every
action is disabled; a name of only spaces is refused with a message. The CSV downloaded through the page's
own button carries the reviewer, the replaced cohort and the qualifier rows; the audit trail the choice.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from typing import Any

import pytest

from phenoforge.agent import audit
from tests.browser import support as web
from tests.browser.test_assemble_browser import _candidate_codes, _keyed, _session_id, _settled_choice
from tests.dashboard.fixture_data import build_dashboard_data

pytestmark = [pytest.mark.browser, web.requires_browser]

REVIEWER = "Grace Reviewer"
# offline decomposer on the fixture data: "diabetes mellitus" (two curated cohorts proposed: type 1, type 2) and
# "femur fracture" (no cohort: generated candidates); adults, hospitalized, on metformin are no code's
DESCRIPTION = "adults hospitalized with diabetes mellitus or a femur fracture, on metformin"
QUALIFIERS = ("age or sex: adults", "setting: hospitalized", "treatment: on metformin")


def _disabled(driver: Any, key: str) -> bool:
    from selenium.webdriver.common.by import By

    buttons = driver.find_elements(By.XPATH, f"{_keyed(key)}//button")
    assert buttons, f"no button {key}"
    return buttons[0].get_attribute("disabled") is not None


_type = web.type_into


def _pick(driver: Any, key: str, starts: str) -> None:
    """Open the selectbox ``key`` and click the option whose text starts with ``starts``."""
    web.click(driver, f"{_keyed(key)}//input")
    web.click(driver, f'//*[@role="option"][starts-with(normalize-space(), "{starts}")]')
    web.wait_idle(driver)


def _downloaded(folder: Path, pattern: str) -> Path:
    deadline = time.monotonic() + web.WAIT
    while time.monotonic() < deadline:
        done = [path for path in folder.glob(pattern) if not path.name.endswith(".crdownload")]
        if done:
            return done[0]
        time.sleep(0.2)  # polling for the browser's download, not an assertion
    raise AssertionError(f"no {pattern} downloaded into {folder}: {list(folder.iterdir())}")


def test_description_to_a_reviewed_export_through_the_gate(tmp_path: Path, driver: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    data_dir = build_dashboard_data(tmp_path / "data")
    server = web.start_server(data_dir, tmp_path / "streamlit.log")
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    try:
        driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        driver.get(f"{server.url}/Assemble")
        web.wait_text(driver, "Reviewer name", "Population description", "Decompose and search")
        web.wait_idle(driver)
        _type(driver, "as_description", DESCRIPTION, tag="textarea")
        web.click_button(driver, "Decompose and search")
        web.wait_text(driver, "Curated cohorts proposed", "Generated candidates", "femur fracture")
        web.wait_idle(driver)
        web.no_exception(driver)

        # the qualifiers no code expresses, and what the gate waits for, before any row
        web.wait_text(driver, "apply these in the cohort's other criteria", *QUALIFIERS)
        page = web.body(driver)
        waits_at = page.index("Before the list can leave Assemble")
        assert waits_at < page.index("Curated cohorts proposed") < page.index("Generated candidates")
        assert "Enter your name in Reviewer name above" in page
        assert "confirm or replace the curated cohort proposed for 'diabetes mellitus'" in page
        assert _disabled(driver, "as_settle_0") and _disabled(driver, "as_accept_all")
        assert _disabled(driver, "as_assemble")
        web.shot(driver, "assemble-gate-proposal")

        _type(driver, "as_reviewer", "    ")
        web.wait_text(driver, "A reviewer name of only spaces is not a name")
        assert _disabled(driver, "as_settle_0")
        web.shot(driver, "assemble-gate-blank-reviewer")
        _type(driver, "as_reviewer", REVIEWER)
        web.wait_text(driver, "Confirm the proposed cohort")
        WebDriverWait(driver, web.WAIT, poll_frequency=0.2).until(lambda d: not _disabled(d, "as_settle_0"))
        assert "only spaces" not in web.body(driver)

        # replace the proposed cohort with the second one, with a reason
        _pick(driver, "as_pick_0", "2. Type 2 diabetes mellitus")
        web.wait_text(driver, "Use this cohort instead")
        _type(driver, "as_reason_0", "the trial enrols type 2 only")
        web.click_button(driver, "Use this cohort instead")
        web.wait_text(driver, "replaced the proposed ohdsi-fixture/499")
        web.wait_idle(driver)
        web.no_exception(driver)
        session_id = _session_id(driver)

        # review by branch: the most relevant block (the femur fractures) included in one action, with a reason
        codes = _candidate_codes(driver)
        assert "S72" in codes, codes
        assert "Include branch with descendants" in web.body(driver)
        _type(driver, "as_why", "femur fractures are in scope")
        web.click_button(driver, "Include branch with descendants")
        web.wait_text(driver, "candidates, included.")
        web.wait_idle(driver)
        assert all(_settled_choice(driver, code, "accept") == "accept" for code in codes if code.startswith("S7"))
        web.shot(driver, "assemble-gate-branch-included")
        web.click_button(driver, "Reject all pending")
        web.wait_text(driver, "Generated candidates (0 of ")
        web.wait_idle(driver)
        # the radios show what was saved (they kept showing "pending" after a bulk action)
        assert _settled_choice(driver, "S72", "accept") == "accept"
        assert not _disabled(driver, "as_assemble")
        assert "Before the list can leave Assemble" not in web.body(driver)

        web.click_button(driver, "Assemble concept set")
        web.wait_text(driver, "Concept set:", f"Reviewed by {REVIEWER}", "Download CSV", *QUALIFIERS)
        web.wait_idle(driver)
        web.no_exception(driver)
        web.shot(driver, "assemble-gate-exported")
        web.click_button(driver, "Download CSV")
        exported = _downloaded(downloads, "concept_set_*.csv").read_text(encoding="utf-8")
        rows = list(csv.DictReader(io.StringIO(exported)))
        assert {row["reviewer"] for row in rows} == {REVIEWER}
        assert {row["source"] for row in rows if row["tier"] == "curated"} == {"ohdsi-fixture/503"}
        s72 = next(row for row in rows if row["code"] == "S72")
        assert (s72["tier"], s72["decision"], s72["reason"]) == (
            "generated",
            "accept with descendants",
            "femur fractures are in scope",
        )
        assert [(row["source"], row["terms"]) for row in rows if row["tier"] == "qualifier"] == [
            tuple(q.split(": ")) for q in QUALIFIERS
        ]
        assert all("other criteria" in row["evidence"] for row in rows if row["tier"] == "qualifier")
        assert driver.find_elements(By.XPATH, f"{_keyed('as_dl_audit')}//button")
    finally:
        server.stop()

    trail = audit.decisions(session_id, path=data_dir / "app_state.sqlite")
    kinds = [(r.decision, r.reviewer) for r in trail if r.decision not in ("accept", "reject")]
    assert kinds == [("qualifier", ""), ("qualifier", ""), ("qualifier", ""), ("replace-cohort", REVIEWER)]
    replaced = next(r for r in trail if r.decision == "replace-cohort")
    assert replaced.code == "ohdsi-fixture/503" and replaced.reason.endswith("(the trial enrols type 2 only)")
    assert {r.reviewer for r in trail if r.decision in ("accept", "reject")} == {REVIEWER}

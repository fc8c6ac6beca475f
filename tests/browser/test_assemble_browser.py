"""The Assemble page in a real browser, across a restart of the streamlit server.

A reviewer starts a session, accepts one generated candidate and rejects another through the
page's own radios, saves; the server process is stopped and a new one started on the same data
dir; the ``?session=`` link must bring back both decisions and an audit trail that lists them
with the reviewer's name, and the app-state database must hold the same two rows.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from phenoforge.agent import audit
from tests.browser import support as web
from tests.dashboard.fixture_data import build_dashboard_data

pytestmark = [pytest.mark.browser, web.requires_browser]

REVIEWER = "Ada Reviewer"
# the offline decomposer gives "asthma" (curated: cohort 521) and "femur fracture", which no
# fixture cohort covers, so it falls through to generated candidates (checked by the AppTests)
DESCRIPTION = "adults with asthma or a femur fracture"
ACCEPTED = "S72"


@pytest.fixture
def servers() -> Iterator[list[web.Server]]:
    """Servers the test starts; whatever is still running is stopped in teardown."""
    started: list[web.Server] = []
    yield started
    for server in started:
        server.stop()


def _slug(key: str) -> str:
    """Streamlit's ``st-key-<key>`` class replaces characters such as the dots of codes with '-'."""
    return re.sub(r"[^a-zA-Z0-9_-]", "-", key)


def _keyed(key: str) -> str:
    """XPath of the element container streamlit tags with the class ``st-key-<key>``."""
    return f'//div[contains(concat(" ", normalize-space(@class), " "), " st-key-{_slug(key)} ")]'


def _candidate_codes(driver: Any) -> list[str]:
    """The codes of the review rows, in page order (the bold code that leads each row's label)."""
    from selenium.webdriver.common.by import By

    slugs = []
    for element in driver.find_elements(By.XPATH, '//div[contains(@class, "st-key-as_dec_")]'):
        slugs += [
            name.removeprefix("st-key-as_dec_")
            for name in (element.get_attribute("class") or "").split()
            if name.startswith("st-key-as_dec_")
        ]
    shown = [str(strong.text).strip() for strong in driver.find_elements(By.XPATH, "//strong")]
    codes = [code for code in shown if _slug(code) in slugs]
    assert [_slug(code) for code in codes] == slugs, (shown, slugs)
    return codes


def _choose(driver: Any, code: str, choice: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    option = f'{_keyed(f"as_dec_{code}")}//label[@data-testid="stRadioOption"][normalize-space()="{choice}"]'
    WebDriverWait(driver, web.WAIT).until(ec.element_to_be_clickable((By.XPATH, option))).click()
    WebDriverWait(driver, web.WAIT, poll_frequency=0.2).until(lambda d: _chosen(d, code) == choice)


def _settled_choice(driver: Any, code: str, expected: str) -> str | None:
    """Wait (up to ``web.WAIT``) for the ``code`` radio to show ``expected``, then report what it shows.

    After a restart the page re-renders once the server's indexes are loaded (faster since BM25 is
    read from disk), so a radio read straight after the first render can be stale or not yet drawn.
    """
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    with contextlib.suppress(TimeoutException):
        WebDriverWait(driver, web.WAIT, poll_frequency=0.2).until(lambda d: _chosen(d, code) == expected)
    return _chosen(driver, code)


def _chosen(driver: Any, code: str) -> str | None:
    """The option whose radio input is checked in the ``as_dec_<code>`` group."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        for label in driver.find_elements(By.XPATH, f'{_keyed(f"as_dec_{code}")}//label[@data-testid="stRadioOption"]'):
            if label.find_element(By.CSS_SELECTOR, 'input[type="radio"]').is_selected():
                return str(label.text.strip())
    except StaleElementReferenceException:
        return None
    return None


def _audit_trail(driver: Any, n: int, *texts: str) -> str:
    """Expand the audit-trail expander and wait until its table's rendered cells show ``texts``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    expander = f'//details[.//summary[contains(normalize-space(), "Audit trail ({n} decisions)")]]'
    WebDriverWait(driver, web.WAIT).until(ec.element_to_be_clickable((By.XPATH, f"{expander}//summary"))).click()
    grid = f'{expander}//*[@data-testid="stDataFrame"]'

    def cells(d: Any) -> str:
        found = d.find_elements(By.XPATH, grid)  # the grid's accessible table, one cell per value
        return str(found[0].get_attribute("textContent")) if found and found[0].is_displayed() else ""

    try:
        WebDriverWait(driver, web.WAIT, poll_frequency=0.2).until(lambda d: all(t in cells(d) for t in texts))
    except Exception as error:
        raise AssertionError(f"audit trail never showed {texts!r}; it shows {cells(driver)!r}") from error
    return cells(driver)


def _session_id(driver: Any) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, web.WAIT, poll_frequency=0.2).until(
        lambda d: parse_qs(urlparse(d.current_url).query).get("session")
    )
    return parse_qs(urlparse(driver.current_url).query)["session"][0]


def test_assembly_session_and_audit_trail_survive_a_server_restart(
    tmp_path: Path, servers: list[web.Server], driver: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    data_dir = build_dashboard_data(tmp_path / "data")
    servers.append(web.start_server(data_dir, tmp_path / "streamlit-1.log"))
    driver.get(f"{servers[0].url}/Assemble")
    web.wait_text(driver, "Reviewer name", "Population description", "Decompose and search")
    web.wait_idle(driver)
    web.no_exception(driver)

    reviewer = driver.find_element(By.XPATH, f"{_keyed('as_reviewer')}//input")
    reviewer.send_keys(REVIEWER, Keys.ENTER)
    WebDriverWait(driver, web.WAIT).until(lambda d: reviewer.get_attribute("value") == REVIEWER)
    web.wait_idle(driver)
    driver.find_element(By.XPATH, f"{_keyed('as_description')}//textarea").send_keys(DESCRIPTION)
    web.click_button(driver, "Decompose and search")
    web.wait_text(driver, "Seed terms", "Generated candidates", "femur fracture")
    web.wait_idle(driver)
    web.no_exception(driver)

    codes = _candidate_codes(driver)  # the rows of the branch in review (the most relevant block)
    assert ACCEPTED in codes, codes
    total = int(re.findall(r"Generated candidates \((\d+) of \1 pending\)", web.body(driver))[0])
    rejected = next(code for code in codes if code != ACCEPTED)
    assert _chosen(driver, ACCEPTED) == "pending" and _chosen(driver, rejected) == "pending"
    _choose(driver, ACCEPTED, "accept")
    web.wait_idle(driver)
    _choose(driver, rejected, "reject")
    web.wait_idle(driver)
    web.click_button(driver, "Save 2 decisions")
    web.wait_text(driver, f"Generated candidates ({total - 2} of {total} pending)", "Audit trail (3 decisions)")
    web.wait_idle(driver)
    web.no_exception(driver)
    session_id = _session_id(driver)
    # one audit row per decision: reviewer, code and decision are adjacent cells of the row
    rows = (f"{session_id}", f"{REVIEWER}{ACCEPTED}accept", f"{REVIEWER}{rejected}reject")
    before = _audit_trail(driver, 3, *rows)  # and the qualifier "adults", noted at the start
    assert before.count(REVIEWER) == 2
    web.shot(driver, "assemble-before-restart")

    first = servers[0]
    first.stop()
    assert first.process.poll() is not None
    assert not web.healthy(first.url)

    servers.append(web.start_server(data_dir, tmp_path / "streamlit-2.log"))
    assert servers[1].url != first.url
    driver.get(f"{servers[1].url}/Assemble?session={session_id}")
    web.wait_text(
        driver,
        f"Session {session_id}",
        DESCRIPTION,
        f"Generated candidates ({total - 2} of {total} pending)",
        "Audit trail (3 decisions)",
    )
    web.wait_idle(driver)
    web.no_exception(driver)
    assert _settled_choice(driver, ACCEPTED, "accept") == "accept"
    assert _settled_choice(driver, rejected, "reject") == "reject"
    assert all(
        _settled_choice(driver, code, "pending") == "pending" for code in codes if code not in {ACCEPTED, rejected}
    )
    after = _audit_trail(driver, 3, *rows)
    assert after.count(REVIEWER) == 2
    web.shot(driver, "assemble-after-restart")

    trail = audit.decisions(session_id, path=data_dir / "app_state.sqlite")
    assert [(r.decision, r.terms) for r in trail if r.decision == "qualifier"] == [("qualifier", "age or sex: adults")]
    trail = [r for r in trail if r.decision != "qualifier"]
    assert sorted((r.code, r.decision, r.reviewer, r.description, r.session_id) for r in trail) == sorted(
        [
            (ACCEPTED, "accept", REVIEWER, DESCRIPTION, session_id),
            (rejected, "reject", REVIEWER, DESCRIPTION, session_id),
        ]
    )
    state = audit.load_state(session_id, path=data_dir / "app_state.sqlite")
    assert state.candidate(ACCEPTED).decision == "accept"  # type: ignore[union-attr]
    assert state.candidate(rejected).decision == "reject"  # type: ignore[union-attr]

"""Versions in a real browser: a reviewed list saved as a version from the Assemble page, listed on the Versions
page, and compared on the Compare page against the curated cohort it drew on."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from phenoforge.lists import store
from tests.browser import support as web

pytestmark = [pytest.mark.browser, web.requires_browser]

REVIEWER = "Ada Reviewer"
DESCRIPTION = "adults with asthma or a femur fracture"  # asthma: curated cohort 521; femur fracture: generated
LIST = "asthma-fracture"
SHOTS = Path("/tmp/phenoforge-versions-shots")


_keyed = web.keyed


_type = web.type_into


def _select(driver: Any, key: str, option: str) -> None:
    """Pick the option whose label starts with ``option`` in the selectbox ``key`` (a combo box: type to filter,
    then click the option), and wait until the box shows it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    web.click(driver, f"{_keyed(key)}//input")
    box = driver.find_element(By.XPATH, f"{_keyed(key)}//input")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(option)
    web.click(driver, f'//*[@role="option"][starts-with(normalize-space(), "{option}")]')
    WebDriverWait(driver, web.WAIT, poll_frequency=0.2).until(
        lambda d: str(d.find_element(By.XPATH, f"{_keyed(key)}//input").get_attribute("value")).startswith(option)
    )
    web.wait_idle(driver)


def _shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(web.shot(driver, name), SHOTS / f"{name}.png")


def test_save_a_version_list_it_and_compare_it_with_a_curated_cohort(
    server: str, data_dir: Path, driver: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{server}/Assemble")
    web.wait_text(driver, "Reviewer name", "Population description", "Decompose and search")
    _type(driver, "as_reviewer", REVIEWER)
    _type(driver, "as_description", DESCRIPTION, tag="textarea")
    web.click_button(driver, "Decompose and search")
    web.wait_text(driver, "Seed terms", "Generated candidates", "femur fracture")
    if "Confirm the proposed cohort" in web.body(driver):  # the gate: a curated match is only a proposal
        web.click_button(driver, "Confirm the proposed cohort")
        web.wait_text(driver, "confirmed the proposed")
        web.wait_idle(driver)
    web.click_button(driver, "Accept all pending")
    web.wait_text(driver, "(0 of")
    web.click_button(driver, "Assemble concept set")
    web.wait_text(driver, "Concept set:", "Save as version", "the list's first one")
    web.no_exception(driver)
    _type(driver, "as_vs_list", LIST)
    _type(driver, "as_vs_note", "first sign-off")
    web.click_button(driver, "Save as version")
    web.wait_text(driver, f"Saved {LIST}@1", f"{LIST} has 1 versions: this is version 2")
    web.no_exception(driver)
    _shot(driver, "versions-assemble-saved")
    saved = store.load_version(LIST, 1, root=data_dir / "versions")
    assert saved.reviewer == REVIEWER and saved.note == "first sign-off"
    assert {"J45.20", "J45.909", "S72"} <= set(saved.code_list)
    curated = {entry.code for entry in saved.codes if entry.decision == "curated"}
    assert {"J45.20", "J45.909"} <= curated

    driver.set_window_size(*web.NARROW)  # the two new pages at 1,280 px: nothing scrolls sideways
    driver.get(f"{server}/Versions")
    web.wait_text(driver, "Lists (1)", f"Versions of {LIST}", f"{LIST}@1", f"signed off by {REVIEWER}")
    web.wait_idle(driver)
    web.no_exception(driver)
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, web.WAIT, poll_frequency=0.2).until(lambda d: web.grid_rows(d, 0))  # drawn after the run
    grid = web.grid_rows(driver, 0)
    assert grid[0][0] == LIST and grid[0][1] == "1" and grid[0][2] == REVIEWER, grid
    web.wait_text(driver, "Codes (")
    web.assert_fits(driver)
    _shot(driver, "versions-list")

    driver.get(f"{server}/Compare")
    web.wait_text(driver, "Left (ground truth)", "Right (scored)", f"version:{LIST}@1")
    web.wait_idle(driver)
    _select(driver, "cmp_right_cohort_ohdsi-fixture", "521")
    web.wait_text(driver, "ohdsi-fixture/521: 2 codes")
    metrics = web.wait_metrics(driver, "shared", "only left", "only right", "hierarchical")
    n = len(saved.code_list)
    assert metrics["shared"] == "2" and metrics["only left"] == str(n - 2) and metrics["only right"] == "0", metrics
    web.wait_text(driver, "Shared (2)", f"Only left ({n - 2})", "Only right (0)")
    assert float(metrics["coverage"]) < 1.0 and float(metrics["over-inclusion"]) == 0.0
    web.no_exception(driver)
    web.assert_fits(driver)
    _shot(driver, "versions-compare")

    # an uploaded list with an unknown and a non-billable code: both named, neither dropped
    upload = tmp_path / "mine.csv"
    upload.write_text("code,name\nJ45.20,a\nJ45,b\nZZ9.99,c\n", encoding="utf-8")
    option = '//label[@data-testid="stRadioOption"][normalize-space()="Uploaded CSV"]'
    web.click(driver, f"{_keyed('cmp_right_source')}{option}")
    web.wait_element(driver, '.st-key-cmp_right_upload input[type="file"]')
    driver.find_element(By.CSS_SELECTOR, '.st-key-cmp_right_upload input[type="file"]').send_keys(str(upload))
    web.wait_text(
        driver,
        "mine.csv: 3 codes",
        "mine.csv: not in this vocabulary (1): ZZ9.99",
        "mine.csv: not billable (1; a category or block",
        "): J45",
    )
    metrics = web.wait_metrics(driver, "shared", "only right")
    assert metrics["shared"] == "2" and metrics["only right"] == "0", metrics  # J45.20 and J45: both in the version
    web.no_exception(driver)
    _shot(driver, "versions-compare-upload")

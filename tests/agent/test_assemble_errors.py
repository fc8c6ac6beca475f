"""``assemble`` refuses or reports in one line what it cannot use: a damaged session, a control-character
description; and ``--audit --csv`` writes the file it was asked for."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from phenoforge.agent import audit
from phenoforge.cli import main
from phenoforge.config import app_state_db_path
from tests.agent.test_cli import DESCRIPTION, _fixture_vocabulary  # noqa: F401  # the autouse fixture


def _assembled(fixture_library: Path) -> str:
    argv = ["assemble", DESCRIPTION, "--reviewer", "ann", "--yes", "--library", str(fixture_library)]
    assert main(argv) == 0
    return audit.list_sessions()[0].session_id


@pytest.mark.parametrize("damage", ['{"session_id": 1}', "{ cut off", ""])
def test_resume_of_a_damaged_session_is_one_line(
    fixture_library: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    session = _assembled(fixture_library)
    with sqlite3.connect(app_state_db_path()) as con:
        con.execute("UPDATE assembly_session SET state = ? WHERE session_id = ?", [damage, session])
    capsys.readouterr()
    assert main(["assemble", "--resume", session, "--reviewer", "ann", "--no-input"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "validation error" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and session in lines[0] and "damaged" in lines[0], err


def test_audit_with_csv_writes_the_file(
    fixture_library: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = _assembled(fixture_library)
    target = tmp_path / "trail.csv"
    capsys.readouterr()
    assert main(["assemble", "--audit", session, "--csv", str(target)]) == 0
    rows = list(csv.DictReader(target.open(encoding="utf-8")))
    assert rows and {row["session_id"] for row in rows} == {session}
    assert len(rows) == len(audit.decisions(session))
    assert f"wrote {target}" in capsys.readouterr().out


@pytest.mark.parametrize("description", ["heart \x1b[2J\x1b]0;pwned\x07failure", "asthma\x00", "copd\x9b31m"])
def test_a_description_with_control_characters_is_refused_without_echoing_them(
    fixture_library: Path, capsys: pytest.CaptureFixture[str], description: str
) -> None:
    code = main(["assemble", description, "--reviewer", "ann", "--yes", "--library", str(fixture_library)])
    captured = capsys.readouterr()
    assert code == 2
    assert "control character" in captured.err, captured.err
    assert not any(ch in captured.out + captured.err for ch in "\x1b\x00\x07\x9b")
    assert audit.list_sessions() == []


def test_a_description_with_tabs_and_newlines_is_accepted(fixture_library: Path) -> None:
    assert (
        main(
            [
                "assemble",
                "adults with\tasthma\nor copd",
                "--reviewer",
                "ann",
                "--yes",
                "--library",
                str(fixture_library),
            ]
        )
        == 0
    )


def test_list_shows_a_stored_escape_sequence_escaped(fixture_library: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A session saved before descriptions were checked still lists without its escapes reaching the terminal."""
    session = _assembled(fixture_library)
    with sqlite3.connect(app_state_db_path()) as con:
        con.execute("UPDATE assembly_session SET description = ? WHERE session_id = ?", ["red \x1b[31m\u202e", session])
    capsys.readouterr()
    assert main(["assemble", "--list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "red \\x1b[31m\\u202e" in out


def test_a_session_row_holding_another_sessions_state_is_not_resumed(
    fixture_library: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _assembled(fixture_library)
    _assembled(fixture_library)
    (second,) = {s.session_id for s in audit.list_sessions()} - {first}
    with sqlite3.connect(app_state_db_path()) as con:  # the second row now holds the first's state
        state = con.execute("SELECT state FROM assembly_session WHERE session_id = ?", [first]).fetchone()[0]
        con.execute("UPDATE assembly_session SET state = ? WHERE session_id = ?", [state, second])
    capsys.readouterr()
    assert main(["assemble", "--resume", second, "--reviewer", "bo", "--yes"]) == 2
    err = capsys.readouterr().err
    assert f"session '{second}' holds the state of another session ('{first}')" in err and "Traceback" not in err
    assert audit.saved_state(first) == state  # the first session is not overwritten by a resume of the second


def test_audit_with_csv_and_json_keeps_stdout_json(
    fixture_library: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = _assembled(fixture_library)
    target = tmp_path / "trail.csv"
    capsys.readouterr()
    assert main(["assemble", "--audit", session, "--csv", str(target), "--json"]) == 0
    captured = capsys.readouterr()
    assert isinstance(json.loads(captured.out), list) and f"wrote {target}" in captured.err
    assert target.is_file()


@pytest.mark.parametrize(
    ("flag", "text", "said"),
    [
        ("--reviewer", "ann\x9b31m", "control character (U+009B"),
        ("--reviewer", "ann\udcff", "not text in your terminal's encoding"),
        ("--reason", "fine\x1b[2J", "control character (U+001B"),
        ("--reason", "two\nlines", "line break"),
    ],
)
def test_a_reviewer_or_reason_with_control_characters_is_refused_before_any_work(
    fixture_library: Path, capsys: pytest.CaptureFixture[str], flag: str, text: str, said: str
) -> None:
    argv = ["assemble", DESCRIPTION, "--yes", "--library", str(fixture_library), flag, text]
    if flag != "--reviewer":
        argv += ["--reviewer", "ann"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert said in captured.err and "Traceback" not in captured.err
    assert not any(ch in captured.out + captured.err for ch in "\x1b\x9b\udcff")
    assert audit.list_sessions() == []

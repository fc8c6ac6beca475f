"""``version`` against hostile records and typed text (issue 44): signatures, damaged files, control characters,
lists that would mix, FHIR identity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from phenoforge.agent import audit
from phenoforge.agent.state import AssemblyState
from phenoforge.cli import main
from phenoforge.config import REPO_ROOT, versions_dir
from phenoforge.lists import store
from phenoforge.lists.export import fhir_id, version_fhir
from tests.lists.conftest import draft, forge_version, reviewed_session  # noqa: F401  (the fixture)
from tests.test_cli_versions import cli_vocabulary  # noqa: F401  (the fixture)

pytestmark = pytest.mark.usefixtures("cli_vocabulary")
HF = ["I50.21", "I50.22", "I50.9"]


def test_a_forged_version_is_shown_and_exported_as_not_signed_off(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store.save_version(draft(fixture_con, HF))
    forge_version("hf-adults", 1, reviewer="Mallory")
    assert main(["version", "show", "hf-adults@1"]) == 0
    assert "NOT SIGNED OFF (badly signed" in capsys.readouterr().out
    assert main(["version", "list"]) == 0
    assert "[NOT SIGNED OFF" in capsys.readouterr().out
    target = tmp_path / "vs.json"
    assert main(["version", "export", "hf-adults", "--format", "fhir", "-o", str(target)]) == 0
    assert "not signed off" in capsys.readouterr().err
    assert json.loads(target.read_text())["status"] == "draft"


def test_one_damaged_list_or_version_hides_none_of_the_others(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str]
) -> None:
    for list_id in ("a-list", "b-list", "c-list"):
        store.save_version(draft(fixture_con, HF, list_id=list_id))
    store.save_version(draft(fixture_con, HF[:2], list_id="c-list", based_on=1))
    for list_id, number in (("b-list", 1), ("c-list", 1)):
        path = versions_dir() / list_id / f"v{number:04d}.json"
        path.chmod(0o644)
        path.write_text("{ damaged")
    assert main(["version", "list"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("a-list  1 versions") and "\nc-list  2 versions; latest 2" in captured.out
    assert "unreadable, skipped: version 1 of b-list" in captured.err and "Traceback" not in captured.err
    assert main(["version", "list", "c-list"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("c-list@2 ") and "version 1 of c-list" in captured.err


def test_stored_control_characters_are_printed_escaped_everywhere(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store.save_version(draft(fixture_con, HF))
    hostile = "ok\x1b[2J\x1b]0;pwned\x07\x9b31m\u202eend"
    payload = json.loads((versions_dir() / "hf-adults" / "v0001.json").read_text())
    payload["codes"][0]["reason"] = hostile
    forge_version("hf-adults", 1, note=hostile, reviewer=hostile, description=hostile, codes=payload["codes"])
    raw = "\x1b\x07\x9b\u202e"
    for argv in (
        ["version", "list"],
        ["version", "list", "hf-adults"],
        ["version", "show", "hf-adults"],
        ["version", "show", "hf-adults", "--json"],
        ["version", "export", "hf-adults"],
        ["version", "export", "hf-adults", "--format", "fhir"],
    ):
        assert main(argv) == 0, argv
        captured = capsys.readouterr()
        assert not any(ch in captured.out + captured.err for ch in raw), argv
        assert "\\x1b" in captured.out or "\\u001b" in captured.out, argv
    assert main(["version", "show", "hf-adults", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["note"] == hostile  # escaped as JSON: the same value


@pytest.mark.parametrize(
    ("flag", "text", "said"),
    [
        ("--reviewer", "Ann\x9b31m", "control character (U+009B"),
        ("--reviewer", "Ann\udcff", "not text in your terminal's encoding"),
        ("--note", "see \x1b[31mred", "control character (U+001B"),
        ("--note", "two\nlines", "line break"),
    ],
)
def test_save_refuses_typed_control_characters_in_one_line(
    reviewed_session: AssemblyState,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    flag: str,
    text: str,
    said: str,
) -> None:
    audit.save_state(reviewed_session)
    argv = ["version", "save", "--session", "s42", "--list", "af", flag, text]
    if flag != "--reviewer":
        argv += ["--reviewer", "Ann"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1 and not any(ch in err for ch in "\x1b\x9b\udcff")
    assert store.list_ids() == []


def test_edit_refuses_typed_control_characters(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str]
) -> None:
    store.save_version(draft(fixture_con, HF))
    for flag, text in (("--reviewer", "Bo\x9b"), ("--note", "x\x1b[2J")):
        argv = ["version", "edit", "hf-adults", "--reviewer", "Bo", "--note", "why", "--remove", "I50.9"]
        argv[argv.index(flag) + 1] = text
        assert main(argv) == 2
        assert "control character" in capsys.readouterr().err
    assert store.version_numbers("hf-adults") == [1]


def test_saving_into_an_existing_list_of_another_description_needs_a_flag(
    reviewed_session: AssemblyState,  # noqa: F811
    fixture_con: duckdb.DuckDBPyConnection,
    capsys: pytest.CaptureFixture[str],
) -> None:
    audit.save_state(reviewed_session)
    store.save_version(draft(fixture_con, HF, list_id="hf"))  # heart failure; the session is asthma or a fracture
    assert main(["version", "save", "--session", "s42", "--reviewer", "Ann", "--list", " hf "]) == 2
    err = capsys.readouterr().err
    assert "hf is a list of 'adults hospitalized with heart failure'" in err and "--into-existing" in err
    assert store.version_numbers("hf") == [1]
    argv = ["version", "save", "--session", "s42", "--reviewer", "Ann", "--list", "hf", "--into-existing"]
    assert main(argv) == 0
    assert store.version_numbers("hf") == [1, 2]


def test_based_on_must_name_a_version_the_list_has(
    reviewed_session: AssemblyState,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    audit.save_state(reviewed_session)
    assert main(["version", "save", "--session", "s42", "--reviewer", "Ann", "--list", "af"]) == 0
    capsys.readouterr()
    for bad, said in (("999", "af has no version 999 to base yours on: it has version 1 only"), ("0", "positive")):
        with pytest.raises(SystemExit) if bad == "0" else _nothing():
            code = main(["version", "save", "--session", "s42", "--reviewer", "Ann", "--list", "af", "--based-on", bad])
            assert code == 2
        assert said in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["version", "save", "--session", "s42", "--reviewer", "Ann", "--list", "af", "--based-on", "-1"])
    assert store.version_numbers("af") == [1]


class _nothing:  # noqa: N801 - a context manager that expects nothing
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


def test_concurrent_edits_are_told_of_each_other(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str]
) -> None:
    store.save_version(draft(fixture_con, HF))
    store.save_version(draft(fixture_con, HF[:2], based_on=1))  # version 2: the latest
    # Bo edits version 1 (having seen version 2 as the latest); meanwhile Cy saves version 3
    base = store.load_version("hf-adults", 1)
    store.amend(store.load_version("hf-adults", 2), fixture_con, "Cy", "add diabetes", add=["E11.9"])
    result = store.amend(base, fixture_con, "Bo", "drop I50.9", remove=["I50.9"], seen=2)
    assert result.version.number == 4
    assert any("had version 3 (saved by Cy" in note for note in result.notes)


def test_fhir_ids_and_urls_are_unique_per_list_and_version_and_names_are_identifiers(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    long_a, long_b = "x" * 70 + "a", "x" * 70 + "b"
    lists = ["hf_a", "hf-a", "hf.a", "hf..a", "hf.-a", "1st-list", long_a, long_b, "hf-a-v1"]
    ids, urls = set(), set()
    for list_id in lists:
        for number in (1, 2):
            store.save_version(draft(fixture_con, HF, list_id=list_id, based_on=number - 1 or None))
            value_set = version_fhir(store.load_version(list_id, number))
            ids.add(value_set["id"])
            urls.add(value_set["url"])
            assert len(str(value_set["id"])) <= 64 and str(value_set["id"]).replace("-", "").replace(".", "").isalnum()
            name = str(value_set["name"])
            assert name[0].isupper() and name.isascii() and name.replace("_", "").isalnum(), name
    assert len(ids) == len(urls) == 2 * len(lists)
    assert fhir_id("hf-a", 1) == "hf-a-v1"  # a plain name reads as itself


def test_a_version_number_that_is_not_ascii_digits_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "show", "x@\u00b2"]) == 2
    err = capsys.readouterr().err
    assert "a number from 1" in err and "Traceback" not in err


def test_a_closed_pipe_ends_quietly(fixture_con: duckdb.DuckDBPyConnection) -> None:
    entries = draft(fixture_con, HF)
    entries.codes[0].reason = "long reason " * 20_000  # well over a pipe's buffer
    store.save_version(entries)
    process = subprocess.Popen(
        [sys.executable, "-m", "phenoforge", "version", "show", "hf-adults", "--json"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    process.stdout.read(10)  # `| head -c 10`
    process.stdout.close()
    _out, err = process.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert process.returncode == 141

"""Second hostile pass over issue 44 (signed-off versions): regressions for defects found, failing until fixed."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from phenoforge.cli import main
from phenoforge.config import versions_dir
from phenoforge.lists import signing, sources, store
from tests.lists.conftest import draft, forge_version
from tests.test_cli_versions import cli_vocabulary  # noqa: F401  (the fixture)

pytestmark = pytest.mark.usefixtures("cli_vocabulary")
HF = ["I50.21", "I50.22", "I50.9"]


def test_editing_a_forged_version_does_not_call_it_signed_off_nor_sign_its_forged_codes_silently(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str]
) -> None:
    """`version edit` of a version whose signature does not verify said "version 1 is signed off and stays as it
    is" and signed a new version carrying the forged code, with no word that the base was not signed off."""
    saved = store.save_version(draft(fixture_con, HF))
    codes = json.loads(saved.path.read_text())["codes"]
    codes[0]["code"] = "E11.9"  # slipped in by someone without Ann's key
    forge_version("hf-adults", 1, codes=codes)
    assert not store.load_version("hf-adults", 1).signed_off
    code = main(["version", "edit", "hf-adults@1", "--reviewer", "Bob", "--note", "add S72", "--add", "S72.001A"])
    out, err = capsys.readouterr()
    assert "version 1 is signed off" not in out  # it is not
    if code == 0:  # allowed only if the reviewer is told the base is not signed off
        assert "not signed off" in (out + err).lower(), (out, err)


def test_the_compare_source_of_a_forged_version_does_not_say_signed_off(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """The Compare page's caption is `sources.version_list(...).notes`: it said "Signed off by Mallory" for a
    version whose signature does not verify."""
    store.save_version(draft(fixture_con, HF))
    forge_version("hf-adults", 1, reviewer="Mallory")
    listed = sources.version_list("hf-adults@1")
    assert not any(note.startswith("Signed off by") for note in listed.notes), listed.notes


def test_a_deeply_nested_version_file_is_named_unreadable_not_a_traceback(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 0.4 MB file of nested brackets (well under MAX_VERSION_BYTES) raised RecursionError out of json.loads:
    `version list` crashed for every list, and saving to that list crashed too."""
    store.save_version(draft(fixture_con, HF, list_id="a-list"))
    folder = versions_dir() / "b-list"
    folder.mkdir(parents=True)
    (folder / "v0001.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(store.VersionError):
        store.load_version("b-list", 1)
    assert main(["version", "list"]) == 1
    captured = capsys.readouterr()
    assert "a-list" in captured.out and "b-list" in captured.err
    store.save_version(draft(fixture_con, HF, list_id="b-list"), other_description=True)  # no RecursionError


def test_a_key_file_others_can_read_is_named_as_such_on_reading(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """With the reviewer's key made group/world readable, every version of theirs read as "signed with a key
    this computer does not hold for the reviewer": the computer holds it; its mode is the problem."""
    store.save_version(draft(fixture_con, HF))
    signing.key_path("Ann Reviewer").chmod(0o644)
    check = store.load_version("hf-adults", 1).signature_check
    assert not check.verified
    assert "does not hold" not in check.message and "chmod" in check.message, check.message


def test_the_advice_for_an_exposed_key_does_not_unsign_every_earlier_version(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """The save refusal said "make it private (chmod 600) or move it aside to make a new one"; moving it aside
    makes a new key, and every earlier version of the reviewer then reads "badly signed" for good."""
    store.save_version(draft(fixture_con, HF))
    signing.key_path("Ann Reviewer").chmod(0o644)
    with pytest.raises(store.VersionError) as refused:
        store.save_version(draft(fixture_con, HF, based_on=1))
    message = str(refused.value)
    if "move it aside" in message:
        assert "earlier" in message or "no longer verif" in message, message  # says what that costs


def test_a_folder_name_with_a_trailing_newline_is_not_listed_as_another_list(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """LIST_ID ends in '$', which matches before a trailing newline: a folder 'hf-adults\\n' was listed as a
    list of its own, shown with hf-adults' versions (check_list_id strips the name it is then read by)."""
    store.save_version(draft(fixture_con, HF))
    (versions_dir() / "hf-adults\n").mkdir()
    (versions_dir() / "hf-adults\n" / "v0001.json").write_text("{}")
    assert store.list_ids() == ["hf-adults"]


@pytest.mark.parametrize("name", ["v00001.json", "v\u0660\u0660\u0660\u0661.json", "v0001.json\n"])
def test_only_files_named_as_phenoforge_names_them_are_versions(
    fixture_con: duckdb.DuckDBPyConnection, name: str
) -> None:
    """_VERSION_FILE is '\\d{4,}' with '$': 'v00001.json', Arabic-Indic digits and a trailing newline were all
    counted as version 1, so the version was listed twice (and such a file itself never read)."""
    saved = store.save_version(draft(fixture_con, HF))
    (saved.path.parent / name).write_bytes(saved.path.read_bytes())
    assert store.version_numbers("hf-adults") == [1]
    assert len(store.list_versions("hf-adults", problems=[])) == 1


def test_compare_with_a_missing_file_in_a_folder_says_the_file_is_missing(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`compare /some/dir/missing.csv X` said "no library '/some/dir'"; a directory likewise."""
    listed = tmp_path / "mine.txt"
    listed.write_text("I50.9\n")
    (tmp_path / "adir").mkdir()
    for given in (tmp_path / "missing.csv", tmp_path / "adir"):
        assert main(["compare", str(given), str(listed)]) != 0
        err = capsys.readouterr().err
        assert "no library" not in err, err
        assert str(given) in err


def test_saving_after_an_unreadable_latest_version_says_it_cannot_be_read(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """With the latest version unreadable, saving was refused as "copd is a list of ''": a list of nothing."""
    saved = store.save_version(draft(fixture_con, HF))
    saved.path.chmod(0o644)
    saved.path.write_text("not json", encoding="utf-8")
    with pytest.raises(store.VersionError) as refused:
        store.save_version(draft(fixture_con, HF))
    assert "cannot be read" in str(refused.value) and "is a list of ''" not in str(refused.value)


def test_a_diff_names_a_side_that_is_not_signed_off(
    fixture_con: duckdb.DuckDBPyConnection, capsys: pytest.CaptureFixture[str]
) -> None:
    store.save_version(draft(fixture_con, HF))
    store.save_version(draft(fixture_con, HF, based_on=1))
    forge_version("hf-adults", 1, reviewer="Mallory")
    assert main(["version", "diff", "hf-adults@1", "hf-adults@2"]) == 0
    err = capsys.readouterr().err
    assert "hf-adults@1 is NOT SIGNED OFF" in err and "hf-adults@2" not in err

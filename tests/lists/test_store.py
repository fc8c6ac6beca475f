"""Signed-off versions: immutable, numbered once, kept whole through killed writers, concurrent savers and
vocabulary rebuilds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from phenoforge.config import REPO_ROOT
from phenoforge.engine.vocab_build import write_vocabulary
from phenoforge.lists import store
from phenoforge.lists.store import VersionError
from tests.fixture_vocab import fixture_rows
from tests.lists.conftest import draft

HF = ["I50.21", "I50.22", "I50.9"]


def _bytes(root: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((root / "hf-adults").glob("v*.json"))}


def test_save_numbers_versions_and_reads_them_back_whole(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:  # noqa: E501
    first = store.save_version(draft(fixture_con, HF), tmp_path)
    second = store.save_version(draft(fixture_con, HF[:2], based_on=1, note="I50.9 is too vague"), tmp_path)
    assert (first.version.number, second.version.number) == (1, 2) and first.notes == second.notes == []
    again = store.load_version("hf-adults", 1, tmp_path)
    assert again == first.version and again.code_list == HF and again.reviewer == "Ann Reviewer"
    assert again.vocabulary_release == "phenoforge test fixture" and again.vocabulary_build_id
    assert store.load_version("hf-adults", root=tmp_path).number == 2  # no number: the latest
    assert [v.number for v in store.list_versions("hf-adults", tmp_path)] == [1, 2]
    assert store.list_ids(tmp_path) == ["hf-adults"]
    assert not os.access(first.path, os.W_OK) or os.geteuid() == 0  # read-only for anyone but root
    assert oct(first.path.stat().st_mode & 0o777) == "0o444"
    diff = store.diff_versions(first.version, second.version)
    assert [e.code for e in diff.removed] == ["I50.9"] and diff.added == [] and diff.kept == 2


def test_a_signed_off_version_is_never_rewritten(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    saved = store.save_version(draft(fixture_con, HF), tmp_path)
    before = saved.path.read_bytes()
    # the one way a version file is written refuses an existing name (a writer outside the lock)
    assert store._publish(saved.path, b'{"format": 1}') is False
    assert saved.path.read_bytes() == before and not list(tmp_path.glob("hf-adults/.*.tmp"))
    # an edit is a new version based on it; version 1 keeps every byte
    edited = store.amend(saved.version, fixture_con, "Bo Editor", "add E11.9", add=["e119"], root=tmp_path)
    assert edited.version.number == 2 and edited.version.based_on == 1
    assert saved.path.read_bytes() == before
    assert {e.code: e.decision for e in edited.version.codes}["E11.9"] == "added"
    assert edited.version.codes[-1].reason == "add E11.9"
    removed = store.amend(edited.version, fixture_con, "Bo Editor", "too vague", remove=["I50.9"], root=tmp_path)
    assert "I50.9" not in removed.version.code_list
    assert [(e.code, e.decision, e.reason) for e in removed.version.excluded] == [("I50.9", "removed", "too vague")]
    assert _bytes(tmp_path)["v0001.json"] == before


def test_amend_saves_where_asked(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    saved = store.save_version(draft(fixture_con, HF), tmp_path)
    edited = store.amend(saved.version, fixture_con, "Bo", "add", add=["E11.9"], root=tmp_path)
    assert edited.path.parent == tmp_path / "hf-adults" and store.version_numbers("hf-adults", tmp_path) == [1, 2]


def test_a_version_edited_on_disk_is_not_shown_as_signed_off(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    saved = store.save_version(draft(fixture_con, HF), tmp_path)
    payload = json.loads(saved.path.read_text())
    payload["codes"][0]["code"] = "E11.9"
    saved.path.chmod(0o644)
    saved.path.write_text(json.dumps(payload))
    with pytest.raises(VersionError, match="changed on disk after it was signed off"):
        store.load_version("hf-adults", 1, tmp_path)
    with pytest.raises(VersionError, match="changed on disk"):
        store.list_versions("hf-adults", tmp_path)  # a listing hides nothing either


@pytest.mark.parametrize("reviewer", ["", "   ", "\t \u00a0 ", "\u200b \u2060", " \ufeff "])
def test_a_reviewer_name_of_only_spaces_is_refused(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path, reviewer: str
) -> None:
    with pytest.raises(VersionError, match="reviewer name is empty"):
        store.save_version(draft(fixture_con, HF, reviewer=reviewer), tmp_path)
    assert store.list_ids(tmp_path) == []


def test_other_bad_input_is_refused_with_what_to_do(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    with pytest.raises(VersionError, match="reviewer name holds a line break"):
        store.save_version(draft(fixture_con, HF, reviewer="Ann\nEve"), tmp_path)
    for bad in ("../etc", "", "a/b", ".hidden"):
        with pytest.raises(VersionError, match="cannot name a list"):
            store.save_version(draft(fixture_con, HF, list_id=bad), tmp_path)
    with pytest.raises(VersionError, match="nothing to sign off"):
        store.save_version(draft(fixture_con, []), tmp_path)
    with pytest.raises(VersionError, match="listed twice: I50.9"):
        store.save_version(draft(fixture_con, ["I50.9", "I50.9"]), tmp_path)
    store.save_version(draft(fixture_con, HF), tmp_path)
    with pytest.raises(VersionError, match="has no version 7: it has version 1 only"):
        store.load_version("hf-adults", 7, tmp_path)
    with pytest.raises(VersionError, match="no list named 'nope'"):
        store.load_version("nope", root=tmp_path)
    with pytest.raises(VersionError, match="a number from 1"):
        store.parse_ref("hf-adults@0")
    base = store.load_version("hf-adults", 1, tmp_path)
    with pytest.raises(VersionError, match="not in the vocabulary, so not added: ZZ9"):
        store.amend(base, fixture_con, "Bo", "x", add=["ZZ9"], root=tmp_path)
    with pytest.raises(VersionError, match="so not removed: E11.9"):
        store.amend(base, fixture_con, "Bo", "x", remove=["E11.9"], root=tmp_path)
    with pytest.raises(VersionError, match="say what the edit changes"):
        store.amend(base, fixture_con, "Bo", "  ", remove=["I50.9"], root=tmp_path)
    with pytest.raises(VersionError, match="nothing changes"):
        store.amend(base, fixture_con, "Bo", "x", add=["I50.9"], root=tmp_path)
    assert store.version_numbers("hf-adults", tmp_path) == [1]


def test_a_reviewer_who_worked_from_an_older_version_is_told(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    store.save_version(draft(fixture_con, HF), tmp_path)
    alice = store.save_version(draft(fixture_con, HF[:2], reviewer="Alice", based_on=1), tmp_path)
    bob = store.save_version(draft(fixture_con, HF[1:], reviewer="Bob", based_on=1), tmp_path)
    assert alice.notes == [] and bob.version.number == 3
    assert len(bob.notes) == 1 and "version 2 (saved by Alice" in bob.notes[0] and "kept as it is" in bob.notes[0]
    assert store.load_version("hf-adults", 2, tmp_path).code_list == HF[:2]  # Alice's version intact


SAVER = """
import sys, time
from pathlib import Path
from phenoforge.lists import store
draft = store.VersionDraft.model_validate_json(Path(sys.argv[2]).read_text())
go = Path(sys.argv[3])
while not go.exists():
    time.sleep(0.005)
result = store.save_version(draft, Path(sys.argv[1]))
print(result.version.number, "|".join(result.notes))
"""


def test_two_reviewers_saving_the_same_list_at_once_both_keep_a_version(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    root = tmp_path / "versions"
    store.save_version(draft(fixture_con, HF), root)
    go = tmp_path / "go"
    processes = []
    for reviewer, codes in (("Alice", HF[:2]), ("Bob", HF[1:])):
        spec = tmp_path / f"{reviewer}.json"
        spec.write_text(draft(fixture_con, codes, reviewer=reviewer, based_on=1).model_dump_json())
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", SAVER, str(root), str(spec), str(go)],
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    time.sleep(1.5)  # both imported and waiting on the same start signal
    go.touch()
    outputs = [process.communicate(timeout=60)[0].strip() for process in processes]
    assert all(process.returncode == 0 for process in processes), outputs
    numbers = sorted(int(out.split(" ", 1)[0]) for out in outputs)
    assert numbers == [2, 3]
    told = [out for out in outputs if "while you worked" in out]
    assert len(told) == 1 and told[0].startswith("3 ")  # the later one hears of the earlier
    kept = {store.load_version("hf-adults", n, root).reviewer for n in (2, 3)}
    assert kept == {"Alice", "Bob"}


STALLED = """
import os, sys, time
from pathlib import Path
from phenoforge.lists import store
marker = Path(sys.argv[3])
def stalled_link(src, dst, *args, **kwargs):
    marker.write_text(str(src))
    time.sleep(600)
os.link = stalled_link
store.save_version(store.VersionDraft.model_validate_json(Path(sys.argv[2]).read_text()), Path(sys.argv[1]))
"""


def test_a_process_killed_between_the_temporary_write_and_the_rename_loses_nothing(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    root = tmp_path / "versions"
    store.save_version(draft(fixture_con, HF), root)
    store.save_version(draft(fixture_con, HF[:2], based_on=1), root)
    before = _bytes(root)
    spec, marker = tmp_path / "draft.json", tmp_path / "linking"
    spec.write_text(draft(fixture_con, ["E11.9"], reviewer="Killed", based_on=2).model_dump_json())
    process = subprocess.Popen([sys.executable, "-c", STALLED, str(root), str(spec), str(marker)], cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert process.poll() is None and time.monotonic() < deadline, "the saver never reached the link"
            time.sleep(0.05)
        temporary = Path(marker.read_text())
        assert temporary.exists() and temporary.read_bytes()  # the whole version, written but not yet named
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert _bytes(root) == before and store.version_numbers("hf-adults", root) == [1, 2]
    assert [v.reviewer for v in store.list_versions("hf-adults", root)] == ["Ann Reviewer", "Ann Reviewer"]
    assert temporary.exists()  # left by the dead writer ...
    after = store.save_version(draft(fixture_con, ["E11.9"], reviewer="Next", based_on=2), root)
    assert after.version.number == 3 and not temporary.exists()  # ... and cleared by the next save (lock free)
    assert _bytes(root)["v0001.json"] == before["v0001.json"] and _bytes(root)["v0002.json"] == before["v0002.json"]


LOOPING = """
import sys
from pathlib import Path
from phenoforge.lists import store
draft = store.VersionDraft.model_validate_json(Path(sys.argv[2]).read_text())
while True:
    store.save_version(draft.model_copy(update={"based_on": None}), Path(sys.argv[1]))
"""


def test_savers_killed_at_any_moment_leave_whole_versions_numbered_without_gaps(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    root = tmp_path / "versions"
    spec = tmp_path / "draft.json"
    spec.write_text(draft(fixture_con, HF).model_dump_json())
    for delay in (0.0, 0.05, 0.13, 0.31):
        before = len(store.version_numbers("hf-adults", root))
        process = subprocess.Popen([sys.executable, "-c", LOOPING, str(root), str(spec)], cwd=REPO_ROOT)
        deadline = time.monotonic() + 60
        while len(store.version_numbers("hf-adults", root)) == before:  # saving has begun: kill it mid-loop
            assert process.poll() is None and time.monotonic() < deadline, "the saver never saved"
            time.sleep(0.01)
        time.sleep(delay)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        numbers = store.version_numbers("hf-adults", root)
        assert len(numbers) > before and numbers == list(range(1, len(numbers) + 1))
        assert all(v.n_codes == 3 for v in store.list_versions("hf-adults", root))  # each reads whole


def _rebuilt_vocabulary(path: Path) -> Path:
    """The fixture vocabulary rebuilt: I50.22 gone, I50.9 renamed (a new build id and release)."""
    rows = fixture_rows()
    gone = {row[0] for row in rows.concepts if row[2] == "I50.22"}
    rows.concepts = [
        (*row[:4], "Heart failure, not otherwise specified", *row[5:]) if row[2] == "I50.9" else row
        for row in rows.concepts
        if row[0] not in gone
    ]
    rows.parents = [edge for edge in rows.parents if edge[0] not in gone and edge[1] not in gone]
    rows.notes = [note for note in rows.notes if note[0] not in gone]
    rows.metadata["vocabulary_release"] = "phenoforge test fixture, next release"
    return write_vocabulary(path, rows)


def test_a_version_reopened_after_the_vocabulary_was_rebuilt_says_what_changed(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    saved = store.save_version(draft(fixture_con, HF), tmp_path)
    same = store.check_vocabulary(saved.version, fixture_con)
    assert same.same_build and not same.changed and same.messages() == []
    con = duckdb.connect(str(_rebuilt_vocabulary(tmp_path / "rebuilt.duckdb")), read_only=True)
    try:
        check = store.check_vocabulary(store.load_version("hf-adults", 1, tmp_path), con)
    finally:
        con.close()
    assert not check.same_build and check.missing == ["I50.22"]
    assert check.renamed == [("I50.9", "Heart failure, unspecified", "Heart failure, not otherwise specified")]
    text = "\n".join(check.messages())
    assert "then phenoforge test fixture, now phenoforge test fixture, next release" in text
    assert "no longer in the vocabulary (1): I50.22" in text and "I50.9 changed title" in text
    assert store.load_version("hf-adults", 1, tmp_path).code_list == HF  # the version itself is unchanged
    con = duckdb.connect(str(tmp_path / "rebuilt.duckdb"), read_only=True)
    try:  # an edit made with the new vocabulary keeps the gone code, and says so
        edited = store.amend(saved.version, con, "Bo", "drop acute", remove=["I50.21"], root=tmp_path)
    finally:
        con.close()
    assert edited.version.code_list == ["I50.22", "I50.9"]
    assert edited.version.vocabulary_release == "phenoforge test fixture, next release"
    assert edited.notes == ["kept, though this vocabulary no longer has them: I50.22"]

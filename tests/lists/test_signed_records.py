"""A sign-off someone can verify, and a version file that is what its name says (issue 44, items 1 and 2)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from phenoforge.config import REPO_ROOT
from phenoforge.lists import signing, store
from phenoforge.lists.export import version_fhir
from phenoforge.lists.store import VersionError
from tests.lists.conftest import draft

HF = ["I50.21", "I50.22", "I50.9"]


def _rewrite(path: Path, payload: dict[str, object]) -> None:
    path.chmod(0o644)
    path.write_text(json.dumps(payload))


def _forged(path: Path, **changes: object) -> dict[str, object]:
    """The version file at ``path`` edited and its digest recomputed, as someone without the key would."""
    payload = json.loads(path.read_text())
    payload.update(changes)
    payload["digest"] = store._digest(payload)
    _rewrite(path, payload)
    return payload


def test_a_version_edited_with_its_digest_recomputed_is_not_signed_off(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    saved = store.save_version(draft(fixture_con, HF), tmp_path)
    assert saved.version.signed_off and store.load_version("hf-adults", 1, tmp_path).signed_off
    payload = json.loads(saved.path.read_text())
    codes = payload["codes"]
    codes[0]["code"] = "E11.9"
    _forged(saved.path, codes=codes, reviewer="Mallory")
    read = store.load_version("hf-adults", 1, tmp_path)
    assert read.reviewer == "Mallory" and not read.signed_off
    assert read.signature_check.state == "bad" and "not signed off" in read.signature_check.message
    value_set = version_fhir(read)
    assert value_set["status"] == "draft" and "NOT SIGNED OFF" in str(value_set["description"])


def test_a_version_re_signed_with_another_key_is_not_signed_off(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    store.save_version(draft(fixture_con, HF, reviewer="Bob"), tmp_path)  # Bob has a key on this computer
    saved = store.save_version(draft(fixture_con, HF, based_on=1), tmp_path)
    for reviewer, state in (("Mallory", "unknown-key"), ("Bob", "bad")):
        payload = json.loads(saved.path.read_text())
        key = Ed25519PrivateKey.generate()  # a key of the forger's own, made elsewhere
        payload.update(reviewer=reviewer, public_key=signing.public_key_of(key))
        payload["signature"] = signing.sign(store._signed_content(payload), key)[0]
        payload["digest"] = store._digest(payload)
        _rewrite(saved.path, payload)
        read = store.load_version("hf-adults", 2, tmp_path)
        assert read.signature_check.state == state and not read.signed_off
        assert version_fhir(read)["status"] == "draft"


def test_the_key_lives_in_the_configuration_folder_private_and_is_reused(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    first = store.save_version(draft(fixture_con, HF), tmp_path / "versions")
    second = store.save_version(draft(fixture_con, HF[:2], based_on=1), tmp_path / "versions")
    key = signing.key_path("Ann Reviewer")
    assert key.is_relative_to(Path(os.environ["PHENOFORGE_CONFIG_DIR"])) and key.is_file()
    assert not key.is_relative_to(tmp_path / "versions") and not key.is_relative_to(
        Path(os.environ["PHENOFORGE_DATA_DIR"])
    )
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert first.version.public_key == second.version.public_key
    assert base64.b64decode(first.version.public_key) and first.version.signature
    saved = json.loads(first.path.read_text())
    assert saved["public_key"] == first.version.public_key and "PRIVATE" not in first.path.read_text()


def test_a_key_others_can_read_is_refused(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    store.save_version(draft(fixture_con, HF), tmp_path)
    signing.key_path("Ann Reviewer").chmod(0o644)
    with pytest.raises(VersionError, match="chmod 600"):
        store.save_version(draft(fixture_con, HF, based_on=1), tmp_path)
    assert store.version_numbers("hf-adults", tmp_path) == [1]
    assert not store.load_version("hf-adults", 1, tmp_path).signed_off  # nor trusted to verify


def test_a_version_without_a_signature_reads_as_unsigned(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    saved = store.save_version(draft(fixture_con, HF), tmp_path)
    payload = json.loads(saved.path.read_text())
    for field in ("signature", "public_key"):
        del payload[field]
    payload["format"] = 1  # as phenoforge wrote versions before signatures
    payload["digest"] = store._digest(payload)
    _rewrite(saved.path, payload)
    read = store.load_version("hf-adults", 1, tmp_path)
    assert read.signature_check.state == "unsigned" and version_fhir(read)["status"] == "draft"


def test_a_version_file_of_another_list_is_not_read_as_this_lists(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    store.save_version(draft(fixture_con, HF), tmp_path)
    other = store.save_version(draft(fixture_con, ["E11.9"], list_id="diabetes"), tmp_path)
    shutil.copy(other.path, tmp_path / "hf-adults" / "v0002.json")
    with pytest.raises(VersionError, match="holds version 1 of list 'diabetes', not version 2 of hf-adults"):
        store.load_version("hf-adults", 2, tmp_path)
    (tmp_path / "hf-adults" / "v0003.json").symlink_to(tmp_path / "hf-adults" / "v0001.json")
    with pytest.raises(VersionError, match="symbolic link"):
        store.load_version("hf-adults", 3, tmp_path)


def test_a_device_a_pipe_or_a_huge_file_is_refused_without_reading_it(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    store.save_version(draft(fixture_con, HF), tmp_path)
    folder = tmp_path / "hf-adults"
    (folder / "v0002.json").symlink_to("/dev/zero")
    os.mkfifo(folder / "v0003.json")
    with open(folder / "v0004.json", "wb") as handle:
        handle.truncate(store.MAX_VERSION_BYTES + 1)  # sparse: no disk used
    script = (
        "import sys\nfrom pathlib import Path\nfrom phenoforge.lists import store\n"
        "for n in (2, 3, 4):\n"
        "    try:\n        store.load_version('hf-adults', n, Path(sys.argv[1]))\n"
        "    except store.VersionError as error:\n        print(error)\n"
    )
    done = subprocess.run(  # a pipe that hangs the reader would hang the test: a separate process, a time limit
        [sys.executable, "-c", script, str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stderr
    assert "symbolic link" in lines[0] and "not a regular file" in lines[1] and "more than a version file" in lines[2]


def test_one_unreadable_version_hides_none_of_the_others(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    for based_on in (None, 1, 2):
        store.save_version(draft(fixture_con, HF, based_on=based_on), tmp_path)
    path = tmp_path / "hf-adults" / "v0002.json"
    path.chmod(0o644)
    path.write_text("{not json")
    problems: list[str] = []
    listed = store.list_versions("hf-adults", tmp_path, problems=problems)
    assert [v.number for v in listed] == [1, 3] and len(problems) == 1 and "version 2 of hf-adults" in problems[0]
    (tmp_path / "hf-adults" / "v0003.json").chmod(0o644)
    (tmp_path / "hf-adults" / "v0003.json").write_text("[]")
    problems = []
    latest = store.latest_readable("hf-adults", tmp_path, problems)
    assert latest is not None and latest.number == 1 and len(problems) == 2

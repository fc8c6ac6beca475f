"""Commands that write a library replace only a library phenoforge wrote, never a folder of the user's.

``library import``, ``library fetch-ohdsi`` and ``library build-scale`` through ``phenoforge.cli.main``
on the fixture vocabulary: every refusal leaves the folder byte for byte as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from phenoforge.cli import main
from phenoforge.config import data_dir, libraries_dir
from phenoforge.engine.curated import LIBRARY_MARKER, load_library
from tests.athena.athena_fixture import write_phenotype_clone
from tests.fixture_library import write_icd_library
from tests.test_cli_reliability import csv_file, snapshot


@pytest.fixture(autouse=True)
def _fixture_vocabulary(fixture_db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import phenoforge.engine.db as db

    monkeypatch.setattr(db, "connect", lambda *a, **k: duckdb.connect(str(fixture_db_path), read_only=True))


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    return write_phenotype_clone(tmp_path / "clone")


def fetch(clone: Path, *extra: str) -> int:
    return main(["library", "fetch-ohdsi", "--from", str(clone), "--ids", "9519", "--quiet", *extra])


def user_project(folder: Path) -> Path:
    """A folder of someone's work that happens to hold a file named manifest.json."""
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("print('mine')\n")
    (folder / "README").write_text("my project\n")
    (folder / "manifest.json").write_text('{"name": "my web app"}\n')
    return folder


def test_fetch_ohdsi_refuses_the_data_directory(clone: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = data_dir()
    (data / "models").mkdir(parents=True)
    (data / "models" / "fitted-x.json").write_text("{}")
    (data / "app_state.sqlite").write_bytes(b"SQLite format 3\x00")
    write_icd_library(libraries_dir() / "mine", {"hf": ("Heart failure", ["I50.9"], False)}, library_id="mine")
    before = snapshot(data)
    assert fetch(clone, "--dest", str(data)) != 0
    assert "data directory" in capsys.readouterr().err
    assert fetch(clone, "--dest", str(data), "--force") != 0
    assert snapshot(data) == before


def test_fetch_ohdsi_refuses_a_folder_of_the_users_files(
    clone: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    theirs = user_project(tmp_path / "project")
    before = snapshot(theirs)
    assert fetch(clone, "--dest", str(theirs)) != 0
    assert "--force" in capsys.readouterr().err
    assert fetch(clone, "--dest", str(theirs), "--force") != 0
    assert "nothing was touched" in capsys.readouterr().err
    assert snapshot(theirs) == before


def test_fetch_ohdsi_replaces_its_own_library_only_with_force(clone: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fetch(clone) == 0
    assert fetch(clone) != 0
    assert "--force" in capsys.readouterr().err
    assert main(["library", "fetch-ohdsi", "--from", str(clone), "--ids", "9288", "--quiet", "--force"]) == 0
    assert load_library(libraries_dir() / "ohdsi").cohort_ids == ["9288"]


def test_fetch_ohdsi_refuses_a_library_id_already_installed(clone: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fetch(clone) == 0
    capsys.readouterr()
    second = libraries_dir() / "ohdsi-again"
    assert fetch(clone, "--dest", str(second)) != 0
    err = capsys.readouterr().err
    assert "already used by" in err and str(libraries_dir() / "ohdsi") in err
    assert not second.exists()


def test_import_force_refuses_a_folder_with_a_foreign_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    theirs = user_project(tmp_path / "webapp")
    before = snapshot(theirs)
    assert main(["library", "import", str(csv_file(tmp_path)), "--dest", str(theirs), "--force"]) != 0
    assert "nothing was touched" in capsys.readouterr().err
    assert snapshot(theirs) == before


def test_import_force_refuses_a_library_the_user_added_files_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "lib"
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(dest)]) == 0
    (dest / "notes.txt").write_text("my notes on this library\n")
    before = snapshot(dest)
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(dest), "--force"]) != 0
    assert "notes.txt" in capsys.readouterr().err
    assert snapshot(dest) == before


def test_import_force_refuses_a_forged_marker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    theirs = user_project(tmp_path / "webapp")
    (theirs / LIBRARY_MARKER).write_text(json.dumps({"format": "phenoforge-library/1", "library_id": "mine"}))
    before = snapshot(theirs)
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(theirs), "--force"]) != 0
    assert "nothing was touched" in capsys.readouterr().err
    assert snapshot(theirs) == before


def test_import_force_replaces_a_library_phenoforge_wrote(tmp_path: Path) -> None:
    dest = tmp_path / "lib"
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(dest)]) == 0
    other = csv_file(tmp_path, "cohort_id,cohort_name,code\nckd,CKD,N18.3\n", name="other.csv")
    assert main(["library", "import", str(other), "--id", "mine", "--dest", str(dest), "--force"]) == 0
    assert load_library(dest).cohort_ids == ["ckd"]
    assert json.loads((dest / LIBRARY_MARKER).read_text())["library_id"] == "mine"


def test_a_symbolic_link_is_never_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real"
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(real)]) == 0
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    before = snapshot(real)
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(link), "--force"]) != 0
    assert "symbolic link" in capsys.readouterr().err
    assert link.is_symlink() and snapshot(real) == before


def test_build_scale_refuses_a_folder_of_the_users_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    theirs = user_project(tmp_path / "project")
    before = snapshot(theirs)
    assert main(["library", "build-scale", "--dest", str(theirs), "--limit", "2"]) != 0
    assert "--force" in capsys.readouterr().err
    assert main(["library", "build-scale", "--dest", str(theirs), "--limit", "2", "--force"]) != 0
    assert snapshot(theirs) == before


def test_a_library_holding_a_link_to_the_users_folder_is_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = user_project(tmp_path / "home")
    dest = tmp_path / "lib"
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(dest)]) == 0
    (dest / "cohorts" / "home").symlink_to(home, target_is_directory=True)
    before = snapshot(home)
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(dest), "--force"]) != 0
    assert "cohorts/home" in capsys.readouterr().err
    assert (dest / "cohorts" / "home").is_symlink() and snapshot(home) == before


def test_a_library_without_a_marker_is_not_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "lib"
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(dest)]) == 0
    (dest / LIBRARY_MARKER).unlink()
    before = snapshot(dest)
    assert main(["library", "import", str(csv_file(tmp_path)), "--id", "mine", "--dest", str(dest), "--force"]) != 0
    assert LIBRARY_MARKER in capsys.readouterr().err
    assert snapshot(dest) == before


def test_fetch_ohdsi_outside_the_libraries_folder_may_share_an_id(clone: Path, tmp_path: Path) -> None:
    """A folder outside the libraries folder is not installed, so its id shadows nothing (a scratch copy)."""
    assert fetch(clone) == 0
    assert fetch(clone, "--dest", str(tmp_path / "scratch")) == 0
    assert load_library(tmp_path / "scratch").library_id == load_library(libraries_dir() / "ohdsi").library_id

"""``library import`` and ``library list`` through their argparse handlers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import duckdb
import pytest

from phenoforge.cli.library import register_cli


@pytest.fixture()
def cli(fixture_db_path: Path, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    import phenoforge.engine.db as db

    monkeypatch.setattr(db, "connect", lambda *a, **k: duckdb.connect(str(fixture_db_path), read_only=True))
    parser = argparse.ArgumentParser(prog="phenoforge")
    commands = parser.add_subparsers(dest="command", required=True)
    library = commands.add_parser("library").add_subparsers(dest="library_command", required=True)
    register_cli(library)
    return parser


def test_cli_import_and_list(cli: argparse.ArgumentParser, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.csv"
    path.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\nhf,Heart failure,I50.99\n", encoding="utf-8")
    args = cli.parse_args(["library", "import", str(path), "--id", "mine", "--name", "Mine"])
    assert args.func(args) == 0
    out = capsys.readouterr()
    assert "imported 'mine'" in out.out and "1 not in the vocabulary" in out.out
    assert "I50.99" in out.err
    args = cli.parse_args(["library", "import", str(path), "--id", "mine"])
    assert args.func(args) == 2
    assert "--force" in capsys.readouterr().err
    args = cli.parse_args(["library", "list", "--no-build"])
    assert args.func(args) == 0
    listing = capsys.readouterr().out
    assert "mine" in listing.splitlines()[1] and "library_id" in listing
    args = cli.parse_args(["library", "list", "--no-build", "--json"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)[0]["library_id"] == "mine"


def test_cli_import_bad_file(cli: argparse.ArgumentParser, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.csv"
    path.write_text("cohort_id,cohort_name,code\n,Heart failure,I50.9\nhf,HF,nope\n", encoding="utf-8")
    dest = tmp_path / "d"
    args = cli.parse_args(["library", "import", str(path), "--dest", str(dest)])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "line 2: empty cohort_id" in err and "line 3: code 'nope'" in err
    assert not dest.exists()

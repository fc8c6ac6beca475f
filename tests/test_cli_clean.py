"""``clean`` and the pruning at the end of ``build``, on the fixture vocabulary placed where ``connect()`` looks."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from phenoforge import prune
from phenoforge.cli import build_parser, main
from phenoforge.config import data_dir, vocab_db_path
from phenoforge.engine import vocab_build
from phenoforge.engine.dense.model import onnx_model_file
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.setbuild.nodes import node_table_path

OTHER_BUILD = "0" * 32
OLD_ONNX = "all-MiniLM-L6-v2-0.1.0-torch2.1.0-opset17.onnx"


@pytest.fixture(autouse=True)
def fixture_vocabulary(monkeypatch: pytest.MonkeyPatch, fixture_db_path: Path) -> Path:
    def no_build(progress=None):  # noqa: ANN001, ANN202
        raise AssertionError("the CLI tried to rebuild a fixture-source vocabulary")

    monkeypatch.setattr(vocab_build, "icd10cm_rows", no_build)
    vocab_db_path().parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(fixture_db_path, vocab_db_path()))


@pytest.fixture
def models(fixture_con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    """data/models with this build's node table and the installed packages' ONNX export (current), another
    build's node table and an older torch's export (stale), and a user's file (not recognised)."""
    folder = data_dir() / "models"
    folder.mkdir(parents=True, exist_ok=True)
    current = {node_table_path(get_hierarchy(fixture_con).build_id).name, onnx_model_file().name}
    stale = {f"node-table-{OTHER_BUILD}-v1.npz", OLD_ONNX}
    for name in current | stale:
        (folder / name).write_bytes(b"x" * 4096)
    (folder / "notes.txt").write_text("mine")
    return {"current": current, "stale": stale, "unknown": {"notes.txt"}}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _left() -> set[str]:
    return {child.name for child in (data_dir() / "models").iterdir()}


def test_clean_dry_run_lists_what_would_go_with_its_bytes_and_removes_nothing(
    capsys: pytest.CaptureFixture[str], models: dict[str, set[str]]
) -> None:
    code, out, err = run(capsys, "clean", "--dry-run")
    assert code == 0, err
    assert _left() == models["current"] | models["stale"] | models["unknown"]
    for name in models["stale"]:
        assert f"would remove {name} (" in out
    assert "would free 8.2 KB (8,192 bytes)" in out
    assert "left alone notes.txt" in out
    assert not any(f"would remove {name}" in out for name in models["current"])


def test_clean_removes_the_stale_files_and_says_how_much_it_freed(
    capsys: pytest.CaptureFixture[str], models: dict[str, set[str]]
) -> None:
    code, out, err = run(capsys, "clean")
    assert code == 0, err
    assert _left() == models["current"] | models["unknown"]
    for name in models["stale"]:
        assert f"removed {name} (" in out
    assert "2 stale entries freed 8.2 KB (8,192 bytes)" in out


def test_clean_in_a_folder_it_may_not_write_says_so_without_a_traceback(
    capsys: pytest.CaptureFixture[str], models: dict[str, set[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Path, missing_ok: bool = False) -> None:  # root ignores chmod: the refusal is simulated
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    code, out, err = run(capsys, "clean")
    assert code == 1
    assert "Traceback" not in out + err
    for name in models["stale"]:
        assert f"could not remove {name}" in err and "writable" in err
    assert models["stale"] <= _left()
    assert "2 could not be removed" in out


def test_clean_when_data_models_is_a_file_is_one_line_and_removes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    (data_dir() / "models").write_text("not a folder")
    code, out, err = run(capsys, "clean")
    assert code == 1
    assert "not a folder" in err and "Traceback" not in out + err
    assert (data_dir() / "models").read_text() == "not a folder"


def test_clean_without_a_vocabulary_removes_nothing_and_says_why(
    capsys: pytest.CaptureFixture[str], models: dict[str, set[str]]
) -> None:
    vocab_db_path().unlink()
    code, _out, err = run(capsys, "clean")
    assert code == 2
    assert "missing" in err and "nothing was removed" in err and "Traceback" not in err
    assert _left() == models["current"] | models["stale"] | models["unknown"]
    assert not vocab_db_path().exists()  # clean never builds


def test_build_prunes_at_its_end_and_keep_stale_keeps(
    capsys: pytest.CaptureFixture[str], models: dict[str, set[str]]
) -> None:
    code, out, err = run(capsys, "build", "--skip-libraries", "--no-dense", "--quiet", "--keep-stale")
    assert code == 0, err
    assert models["stale"] <= _left() and "stale:" not in out
    code, out, err = run(capsys, "build", "--skip-libraries", "--no-dense", "--quiet")
    assert code == 0, err
    assert _left() == models["current"] | models["unknown"]
    for name in models["stale"]:
        assert f"stale: removed {name} (" in out
    assert "freed 8.2 KB" in out and out.rstrip().splitlines()[-1].startswith("done in")


def test_build_with_nothing_stale_prints_no_prune_lines(
    capsys: pytest.CaptureFixture[str], models: dict[str, set[str]]
) -> None:
    run(capsys, "clean")
    code, out, _err = run(capsys, "build", "--skip-libraries", "--no-dense", "--quiet")
    assert code == 0 and "stale:" not in out


def test_a_prune_failure_does_not_fail_the_build(
    capsys: pytest.CaptureFixture[str], models: dict[str, set[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(prune.Path, "unlink", refuse)
    code, out, err = run(capsys, "build", "--skip-libraries", "--no-dense", "--quiet")
    assert code == 0
    assert "stale: could not remove" in err and "Traceback" not in out + err


def test_help_names_clean_and_its_dry_run() -> None:
    parser = build_parser()
    text = parser.format_help()
    assert "clean" in text and "stale files under data/models" in text
    clean = parser._subparsers._group_actions[0].choices["clean"]  # type: ignore[union-attr]
    assert "--dry-run" in clean.format_help()
    build = parser._subparsers._group_actions[0].choices["build"]  # type: ignore[union-attr]
    assert "--keep-stale" in build.format_help()


def test_a_temporary_named_with_a_pid_no_process_can_have_does_not_fail_the_build(
    capsys: pytest.CaptureFixture[str], models: dict[str, set[str]]
) -> None:
    """A file named like a temporary but carrying a pid past the C long (copied in, or made by hand): no
    process can hold it, so it is a dead writer's; asking the system about that pid raised OverflowError,
    which ended a finished build with a traceback."""
    stray = ".fitted-0123456789abcdef.json.99999999999999999999.abcdef12.tmp"
    (data_dir() / "models" / stray).write_text("x")
    code, out, err = run(capsys, "build", "--skip-libraries", "--no-dense", "--quiet")
    assert code == 0, err
    assert f"stale: removed {stray} (temporary" in out
    assert stray not in _left() and models["unknown"] <= _left()

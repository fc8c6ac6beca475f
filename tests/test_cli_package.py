"""Checks of the CLI package: every command's help, bad arguments, a broken plug-in builder."""

from __future__ import annotations

from pathlib import Path

import pytest

from phenoforge.cli import main

COMMANDS = [
    ["build"],
    ["clean"],
    ["search"],
    ["lookup"],
    ["benchmark"],
    ["methods"],
    ["sweep"],
    ["run"],
    ["run", "import"],
    ["run", "export"],
    ["library"],
    ["library", "import"],
    ["library", "list"],
    ["library", "fetch-ohdsi"],
    ["library", "build-scale"],
    ["assemble"],
    ["decompose-eval"],
    ["agreement"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_commands_help_exits_zero_and_names_itself(command: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m phenoforge {' '.join(command)}")


def test_assemble_help_describes_assemble_only(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["assemble", "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "decompose-eval" not in out


def test_library_import_of_a_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["library", "import", str(tmp_path / "nope.csv")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error:")


def test_decompose_eval_of_a_missing_cases_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["decompose-eval", "--cases", str(tmp_path / "nope.csv")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and "Traceback" not in err


def test_a_broken_plugin_builder_does_not_break_every_commands_help(capsys: pytest.CaptureFixture) -> None:
    from phenoforge.setbuild.builders import UnknownBuilder, register_builder, unregister_builder
    from tests.setbuild.test_builder_contract import _SelfRequiring

    try:
        with pytest.raises(UnknownBuilder, match="requires itself"):  # refused where it is registered
            register_builder(_SelfRequiring)
        with pytest.raises(SystemExit) as exited:
            main(["search", "--help"])
    finally:
        unregister_builder(_SelfRequiring.name)
    assert exited.value.code == 0

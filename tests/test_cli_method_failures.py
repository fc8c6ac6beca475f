"""``benchmark`` with a failing or hanging plug-in: one line says so, the other methods' table stands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.methods import plugin_methods
from tests.test_cli import fixture_vocabulary, run, write_fixture_library

__all__ = ["fixture_vocabulary"]  # the autouse fixture: the fixture vocabulary where the CLI looks

PLUGINS = "tests.methods.plugin_methods"


@pytest.fixture()
def released() -> Iterator[None]:
    plugin_methods.RELEASE.clear()
    yield
    plugin_methods.RELEASE.set()


def test_a_failing_plugin_gets_one_line_and_the_run_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    library = write_fixture_library(tmp_path / "lib")
    spec = f"{PLUGINS}:returns_string"
    code, out, _err = run(capsys, "benchmark", "--library", str(library), "--methods", "bm25", spec, "--no-dense")
    assert code == 0
    assert f"  ! {spec} failed on 3 of 3 cohorts (dm2: answered str, not a list of codes)" in out.splitlines()
    assert any(line.startswith("bm25 ") for line in out.splitlines())


def test_method_timeout_bounds_a_hanging_plugin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], released: None
) -> None:
    library = write_fixture_library(tmp_path / "lib")
    spec = f"{PLUGINS}:blocks"
    argv = ["benchmark", "--library", str(library), "--methods", "bm25", spec, "--no-dense", "--quiet"]
    code, out, _err = run(capsys, *argv, "--method-timeout", "0.2", "--cohorts", "dm2")
    assert code == 0
    assert f"  ! {spec} failed on 1 of 1 cohorts (dm2: no answer within 0.2 s (abandoned, still running))" in out


def test_method_timeout_must_be_a_positive_number(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(capsys, "benchmark", "--method-timeout", "-1")
    assert "--method-timeout" in capsys.readouterr().err

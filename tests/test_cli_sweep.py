"""``sweep --method`` on the fixture vocabulary, with a deterministic fake dense retriever."""

from __future__ import annotations

import json

import pytest

from phenoforge import cli
from phenoforge.cli import sweep as cli_sweep
from phenoforge.config import libraries_dir
from phenoforge.engine.curated import load_library
from phenoforge.engine.db import connect
from phenoforge.eval import sweep as sweep_module
from phenoforge.eval.harness import collect_rankings, rescore_hybrid
from phenoforge.eval.selection import assign_folds
from phenoforge.setbuild.builders import builder_names
from tests.eval.test_harness import FakeDense
from tests.fixture_library import write_icd_library
from tests.test_cli import fixture_vocabulary, run  # noqa: F401  # the autouse fixture vocabulary

COHORTS = {
    "dm2": ("Type 2 diabetes mellitus", ["E11"], True),
    "hf": ("Heart failure", ["I50.9", "I50.21"], False),
    "asthma": ("Asthma", ["J45", "J45.909"], False),
    "obesity": ("Obesity", ["E66.9"], False),
}
WEIGHTS = "0,0.5,1"


@pytest.fixture(autouse=True)
def fake_dense(monkeypatch: pytest.MonkeyPatch) -> FakeDense:
    dense = FakeDense()
    monkeypatch.setattr(cli_sweep, "_dense_or_none", lambda con, wanted, build=False, progress=None: dense)
    write_icd_library(libraries_dir() / "sweep-lib", COHORTS, "sweep-lib")
    return dense


def test_the_default_sweep_is_the_hybrid_sweep_unchanged(
    capsys: pytest.CaptureFixture[str], fake_dense: FakeDense
) -> None:
    code, default_out, err = run(capsys, "sweep", "--library", "sweep-lib", "--weights", WEIGHTS, "--quiet")
    assert code == 0, err
    _code, hybrid_out, _err = run(
        capsys, "sweep", "--library", "sweep-lib", "--weights", WEIGHTS, "--method", "hybrid", "--quiet"
    )
    assert hybrid_out == default_out
    lines = default_out.splitlines()
    assert lines[0] == f"{'library':<22}{'weight':>7}{'coverage':>10}{'over-incl':>11}{'hier.':>8}"

    library_dir = libraries_dir() / "sweep-lib"
    cache = collect_rankings(connect(), library_dir, load_library(library_dir).cohort_ids, dense=fake_dense)
    for line, weight in zip(lines[1:4], (0.0, 0.5, 1.0), strict=True):
        report = rescore_hybrid(connect(), cache, weight, k=25)
        expected = (
            f"{'sweep-lib':<22}{weight:>7.2f}{report.mean_coverage_by_method['hybrid']:>10.3f}"
            f"{report.mean_over_inclusion_by_method['hybrid']:>11.3f}"
            f"{report.mean_hierarchical_score_by_method['hybrid']:>8.3f}"
        )
        assert line == expected
    assert lines[4].startswith("sweep-lib: in-sample best dense_weight=")
    assert len(lines) == 5 and "sweeping" not in default_out


@pytest.mark.parametrize("builder", builder_names())
def test_a_set_builder_is_swept_with_the_cross_validated_report(
    capsys: pytest.CaptureFixture[str], builder: str
) -> None:
    code, out, err = run(
        capsys, "sweep", "--library", "sweep-lib", "--weights", WEIGHTS, "--method", builder, "--folds", "2", "--quiet"
    )
    assert code == 0, err
    assert out.startswith(f"{builder}: sweeping dense_weight")
    assert "fitted on nothing (untuned defaults)" in out  # no development library is installed here
    rows = [line for line in out.splitlines() if line.startswith("sweep-lib ")]
    assert [float(row.split()[1]) for row in rows] == [0.0, 0.5, 1.0]
    assert "cross-validated" in out and "2 folds" in out
    code, out, _err = run(
        capsys, "sweep", "--library", "sweep-lib", "--weights", WEIGHTS, "--method", builder, "--json"
    )
    report = json.loads(out)
    assert report["method"] == builder and report["fitted"]["sweep-lib"]["trained_on"] == []
    assert [row["dense_weight"] for row in report["rows"]] == [0.0, 0.5, 1.0]
    assert report["cross_validated"]["sweep-lib"]["n_cohorts"] == len(COHORTS)


def test_the_out_of_sample_figure_comes_only_from_held_out_folds(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each fold's own best weight is the other fold's worst: chosen on the held-out fold it would score 0.95,
    chosen on the other fold (honestly) it scores 0.0; the in-sample best scores 0.5."""
    folds = assign_folds(list(COHORTS), 2)
    real_sweep = sweep_module.sweep_set_builder

    def adversarial(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        swept = real_sweep(*args, **kwargs)
        for result in swept.report.results:
            weight = float(result.method.split("@")[1])
            fold = folds[result.cohort_id]
            result.hierarchical_score = {0.0: [1.0, 0.0], 1.0: [0.0, 0.9]}.get(weight, [0.2, 0.2])[fold]
        return swept

    monkeypatch.setattr(sweep_module, "sweep_set_builder", adversarial)
    code, out, err = run(
        capsys, "sweep", "--library", "sweep-lib", "--weights", WEIGHTS, "--method", "subtree", "--folds", "2", "--json"
    )
    assert code == 0, err
    choice = json.loads(out)["cross_validated"]["sweep-lib"]
    assert choice["in_sample_choice"] == 0.0 and choice["in_sample_score"] == pytest.approx(0.5)
    assert choice["out_of_sample_score"] == pytest.approx(0.0)  # 0.95 if chosen on the fold it is scored on
    assert sorted(choice["choices_per_fold"]) == [0.0, 1.0]


@pytest.mark.parametrize("method", ["bm25", "expand_descendants", "no_such_method"])
def test_a_method_with_nothing_to_sweep_is_a_one_line_error(capsys: pytest.CaptureFixture[str], method: str) -> None:
    code, out, err = run(capsys, "sweep", "--library", "sweep-lib", "--method", method, "--quiet")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"cannot sweep '{method}'" in err
    assert all(name in err for name in ["hybrid", *builder_names()])


def test_sweep_help_explains_every_option_and_names_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["sweep", "--help"])
    assert exited.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--library LIBRARY library id, folder name or path" in help_text
    assert "default: every bundled library, not imported ones" in help_text
    assert "only these cohort ids (default: every cohort of each library)" in help_text
    assert "(default: 0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1)" in help_text
    sweep_parser = cli.build_parser()._subparsers._group_actions[0].choices["sweep"]
    undocumented = [a.option_strings for a in sweep_parser._actions if a.option_strings and not a.help]
    assert undocumented == []


def test_cohorts_are_checked_against_every_library_before_any_is_swept(
    capsys: pytest.CaptureFixture[str], fake_dense: FakeDense, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second library lacking a cohort was an error only after the first library's sweep (minutes for a builder)."""
    write_icd_library(libraries_dir() / "small-lib", {"dm2": COHORTS["dm2"]}, "small-lib")
    swept: list[str] = []
    real = sweep_module.sweep_library
    monkeypatch.setattr(
        sweep_module, "sweep_library", lambda con, path, *a, **kw: swept.append(path) or real(con, path, *a, **kw)
    )
    argv = ["sweep", "--library", "sweep-lib", "--library", "small-lib", "--weights", WEIGHTS, "--quiet"]
    code, out, err = run(capsys, *argv, "--cohorts", "dm2", "hf", "asthma")
    assert code == 2 and out == "" and swept == []
    assert (
        err == "error: --cohorts applies to every library given: cohort(s) 'hf', 'asthma' not in library 'small-lib'\n"
    )
    code, out, err = run(capsys, *argv, "--cohorts", "dm2", "dm2")
    assert code == 0, err
    assert len(swept) == 2 and "sweep-lib" in out and "small-lib" in out

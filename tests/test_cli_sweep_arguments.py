"""``sweep`` attacked with odd arguments: weights that collide, an empty list, cohorts it leaves out."""

from __future__ import annotations

import json

import pytest

from phenoforge.config import libraries_dir
from tests.fixture_library import write_icd_library
from tests.test_cli import fixture_vocabulary, run  # noqa: F401  # the autouse fixture vocabulary
from tests.test_cli_sweep import fake_dense  # noqa: F401  # the fake dense retriever and the sweep library


@pytest.mark.parametrize("weights", ["0.5,0.5", "0.501,0.504", "0,0.0"])
def test_weights_that_name_one_row_twice_are_refused_before_any_work(
    capsys: pytest.CaptureFixture[str], weights: str
) -> None:
    """0.501 and 0.504 were two runs both labelled ``@0.50``: two identical-looking rows, and a set
    builder's two runs shared one name, so one weight's mean stood for both."""
    with pytest.raises(SystemExit) as error:
        run(capsys, "sweep", "--library", "sweep-lib", "--weights", weights, "--method", "subtree", "--quiet")
    assert error.value.code == 2
    err = capsys.readouterr().err
    assert "twice" in err and "0.01 apart" in err, err


@pytest.mark.parametrize("weights", ["", ",", " , "])
def test_an_empty_weight_list_says_it_is_empty(capsys: pytest.CaptureFixture[str], weights: str) -> None:
    """It said "every weight must be between 0 and 1" about a list with no weight in it."""
    with pytest.raises(SystemExit):
        run(capsys, "sweep", "--library", "sweep-lib", "--weights", weights, "--quiet")
    err = capsys.readouterr().err
    assert "no weights given" in err and "between 0 and 1" not in err, err


GHOSTS = {
    "ghost": ("Ghost condition", ["Z99.99"], False),  # in no vocabulary: nothing to score it against
    "hf": ("Heart failure", ["I50.9", "I50.21"], False),
}


@pytest.mark.parametrize("method", ["hybrid", "subtree"])
def test_a_sweep_over_cohorts_with_no_resolvable_codes_says_so_without_a_traceback(
    capsys: pytest.CaptureFixture[str], method: str
) -> None:
    """``--cohorts ghost`` (its only code is in no vocabulary) crashed with ``KeyError: 'hybrid'``."""
    write_icd_library(libraries_dir() / "ghosts", GHOSTS, "ghosts")
    code, out, err = run(capsys, "sweep", "--library", "ghosts", "--cohorts", "ghost", "--method", method, "--quiet")
    assert code == 2 and out == "", out
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "nothing to sweep" in err and "ghost" in err and "no resolvable ground-truth codes" in err, err


@pytest.mark.parametrize("method", ["hybrid", "subtree"])
def test_a_cohort_the_sweep_leaves_out_is_named_in_the_table_and_the_json(
    capsys: pytest.CaptureFixture[str], method: str
) -> None:
    """The sweep dropped a cohort with no resolvable codes and said nothing: the benchmark names it."""
    write_icd_library(libraries_dir() / "ghosts", GHOSTS, "ghosts")
    code, out, err = run(capsys, "sweep", "--library", "ghosts", "--weights", "0,1", "--method", method, "--quiet")
    assert code == 0, err
    assert "ghosts: skipped 1 cohort(s): ghost/*: no resolvable ground-truth codes" in out, out
    code, out, err = run(
        capsys, "sweep", "--library", "ghosts", "--weights", "0,1", "--method", method, "--quiet", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["skipped"] == {"ghosts": ["ghost/*: no resolvable ground-truth codes"]}

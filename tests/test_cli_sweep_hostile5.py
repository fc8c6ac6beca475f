"""``sweep`` attacked with odd arguments: weights that collide, an empty list, cohorts it leaves out."""

from __future__ import annotations

import pytest

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

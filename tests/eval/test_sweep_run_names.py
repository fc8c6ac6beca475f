"""``sweep_set_builder`` attacked through its API: weights whose runs would share one name."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from phenoforge.eval.qrels import load_qrels
from phenoforge.eval.sweep import SweepError, sweep_set_builder
from tests.eval.test_harness import COHORTS, SCORED, FakeDense
from tests.fixture_library import write_icd_library


def test_two_weights_with_one_run_label_are_refused(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """Both runs were named ``subtree@0.50``: their results were scored as one method."""
    library = write_icd_library(tmp_path / "sweep-lib", COHORTS, "sweep-lib")
    qrels = load_qrels(fixture_con, library, SCORED)
    with pytest.raises(SweepError, match="0.01 apart"):
        sweep_set_builder(fixture_con, qrels, "subtree", [0.501, 0.504], FakeDense())

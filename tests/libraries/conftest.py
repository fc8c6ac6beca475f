"""The synthetic sources every library test builds from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.libraries.sources import DX_ROWS, LABEL_ROWS, write_ccc_csv, write_ccs_csv, write_csv, write_elixhauser_xlsx


@pytest.fixture()
def sources(tmp_path: Path) -> dict[str, Path]:
    return {
        "elixhauser_xlsx": write_elixhauser_xlsx(tmp_path / "cmr.xlsx"),
        "hcc_dx_csv": write_csv(tmp_path / "dx.csv", DX_ROWS),
        "hcc_labels_csv": write_csv(tmp_path / "labels.csv", LABEL_ROWS),
        "ccs_csv": write_ccs_csv(tmp_path / "ccs.csv"),
        "ccc_csv": write_ccc_csv(tmp_path / "ccc.csv"),
    }

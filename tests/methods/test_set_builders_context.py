"""A scored library's cohorts are built in each other's context (their names only); a free query is not."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.curated import load_library
from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import set_building
from phenoforge.setbuild import api
from phenoforge.setbuild.context import CONTEXT_FEATURES
from phenoforge.setbuild.learned import LeakageError
from tests.methods.test_set_builders import ELIX_ID, HCC_ID, _context, installed, small_models  # noqa: F401

CONTEXT_NOTE = "other cohort names as context"


def _learned(con: duckdb.DuckDBPyConnection, library: Path, cohort_ids: list[str]) -> dict[str, tuple]:
    report = run_benchmark(con, library, cohort_ids, methods=["learned", "curated_transfer"])
    return {(r.method, r.cohort_id): (r.predicted_codes, r.provenance) for r in report.results}


@pytest.mark.usefixtures("small_models")
def test_a_library_is_built_in_context_by_a_model_fitted_elsewhere(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
) -> None:
    library = installed[ELIX_ID]
    results = _learned(fixture_con, library, load_library(library).cohort_ids)
    fitted = set_building.fitted_for(_context(fixture_con, library))
    assert fitted.context_model is not None and fitted.model is not None
    assert set(CONTEXT_FEATURES) <= set(fitted.context_model.manifest.features)
    assert not set(CONTEXT_FEATURES) & set(fitted.model.manifest.features)
    # fitted without the scored group, like the model without context; and it refuses its training library
    assert ELIX_ID not in fitted.context_model.manifest.training_libraries
    assert HCC_ID in fitted.context_model.manifest.training_libraries
    with pytest.raises(LeakageError):
        fitted.context_model.check_may_score(HCC_ID, "cms-hcc")
    learned_provenance = [
        p for (method, _c), (_codes, prov) in results.items() if method == "learned" for p in prov.values()
    ]
    assert learned_provenance and all(any(CONTEXT_NOTE in line for line in lines) for lines in learned_provenance)
    free = set_building.build_for_free_query(fixture_con, "learned", "Heart failure")
    assert free.codes and not any(CONTEXT_NOTE in item.provenance.rule for item in free.codes)


@pytest.mark.usefixtures("small_models")
def test_one_cohort_run_alone_gets_the_set_of_the_whole_library_run(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
) -> None:
    """The context is every name the library lists, not the cohorts a run happens to score: a drilldown of
    one cohort shows the set the benchmark scored."""
    library = installed[ELIX_ID]
    cohorts = load_library(library).cohort_ids
    whole = _learned(fixture_con, library, cohorts)
    for cohort_id in cohorts[:2]:
        set_building.clear_fitted()
        alone = _learned(fixture_con, library, [cohort_id])
        for method in ("learned", "curated_transfer"):
            assert alone[(method, cohort_id)] == whole[(method, cohort_id)], (method, cohort_id)


@pytest.mark.usefixtures("small_models")
def test_the_context_model_is_stored_reused_and_kept(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
) -> None:
    context = _context(fixture_con, installed[ELIX_ID])
    first = set_building.fitted_for(context)
    assert first.context_model is not None
    set_building.clear_fitted()
    again = set_building.fitted_for(_context(fixture_con, installed[ELIX_ID]))
    assert any(note.startswith("reused the builders") for note in again.notes)
    assert again.context_model is not None
    assert again.context_model.manifest.training_digest == first.context_model.manifest.training_digest
    files = api.stored_fit_files(context.hierarchy, None, [load_library(p) for p in installed.values()], "elixhauser")
    assert files.found and files.context_model_directory is not None
    assert files.context_model_directory != files.model_directory
    assert (api.models_dir() / files.context_model_directory / "manifest.json").is_file()


@pytest.mark.usefixtures("small_models")
@pytest.mark.parametrize("builder", ["learned", "curated_transfer"])
def test_the_sweep_at_the_fitted_weight_builds_the_benchmarks_sets_in_context(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811
    builder: str,
) -> None:
    from phenoforge.eval.qrels import load_qrels
    from phenoforge.eval.sweep import sweep_label, sweep_set_builder

    library = installed[ELIX_ID]
    cohorts = load_library(library).cohort_ids
    benchmark = run_benchmark(fixture_con, library, cohorts, methods=[builder])
    swept = sweep_set_builder(fixture_con, load_qrels(fixture_con, library, cohorts), builder, [0.0, 0.5], None)
    label = sweep_label(builder, 0.5)
    at_fitted = {r.cohort_id: (r.predicted_codes, r.provenance) for r in swept.report.results if r.method == label}
    assert at_fitted == {r.cohort_id: (r.predicted_codes, r.provenance) for r in benchmark.results}
    assert any(CONTEXT_NOTE in line for r in benchmark.results for lines in r.provenance.values() for line in lines)

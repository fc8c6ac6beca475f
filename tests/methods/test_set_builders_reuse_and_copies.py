"""The set builders attacked as a careless or unlucky user would: copies, re-imports, races, empty answers.

Each test pins one way the fitted builders could score a cohort they saw, reuse a fit made on other
data, crash, or answer nothing without saying why.
"""

from __future__ import annotations

import functools
import json
import threading
from pathlib import Path

import duckdb
import pytest

import phenoforge.setbuild.builders.learned as learned_builder
from phenoforge.config import libraries_dir
from phenoforge.engine.curated import load_library
from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import set_building
from phenoforge.methods.retrieval import Retrieval
from phenoforge.setbuild import api
from tests.fixture_library import write_icd_library
from tests.setbuild.conftest import OTHER_COHORTS, TRAIN_COHORTS

BUILDERS = ["adaptive_cutoff", "subtree", "learned", "curated_transfer"]
HCC_ID = "cms-hcc-v28-fixture"
ELIX_ID = "elixhauser-2026-fixture"
SMALL = {"min_cohorts": 3, "min_positives": 5}
ELIX_COHORTS = {**OTHER_COHORTS, "dm2": TRAIN_COHORTS["dm2"], "af": TRAIN_COHORTS["af"]}


@pytest.fixture(autouse=True)
def _fresh_process_cache() -> None:
    set_building.clear_fitted()


@pytest.fixture
def small_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the fixture's handful of cohorts train a membership model (the real minimum is larger)."""
    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **SMALL))


def _install_development_libraries() -> dict[str, Path]:
    root = libraries_dir()
    return {
        HCC_ID: write_icd_library(root / "hcc", TRAIN_COHORTS, library_id=HCC_ID, group="cms-hcc"),
        ELIX_ID: write_icd_library(root / "elix", ELIX_COHORTS, library_id=ELIX_ID, group="elixhauser"),
    }


def _notes(fitted: api.FittedBuilders) -> str:
    return " | ".join(fitted.notes)


@pytest.mark.usefixtures("small_models")
def test_a_user_import_named_like_a_development_library_never_trains_the_builders(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """A user's copy of Elixhauser imported as 'cms-hcc-v28-mine' must not train the model that scores Elixhauser."""
    installed = _install_development_libraries()
    copy = write_icd_library(libraries_dir() / "mine", ELIX_COHORTS, library_id="cms-hcc-v28-mine", group="mine")
    manifest_path = copy / "manifest.json"
    library = load_library(copy)
    library.manifest.report = {"build": {"imported_from": "/home/me/cms-hcc-v28-mine.csv"}}
    manifest_path.write_text(library.manifest.model_dump_json(indent=1), encoding="utf-8")
    report = run_benchmark(
        fixture_con, installed[ELIX_ID], load_library(installed[ELIX_ID]).cohort_ids, methods=["learned"]
    )
    assert report.methods["learned"].trained_on == [HCC_ID], report.methods["learned"]


@pytest.mark.usefixtures("small_models")
def test_a_development_library_whose_codes_changed_is_refitted_not_reused(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """Re-importing a library with the same cohort ids but other codes must retune and retrain."""
    installed = _install_development_libraries()
    libraries = [load_library(path) for path in installed.values()]
    first = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert first.model is not None
    swapped = {"dm1": ("Type 1 diabetes mellitus", ["E11"], True), "dm2": ("Type 2 diabetes mellitus", ["E10"], True)}
    changed = {**TRAIN_COHORTS, **swapped}
    write_icd_library(
        installed[HCC_ID], changed, library_id=HCC_ID, group="cms-hcc", description="re-imported with new codes"
    )
    libraries = [load_library(path) for path in installed.values()]
    again = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert not any(note.startswith("reused") for note in again.notes), _notes(again)
    assert again.model is not None and any(note.startswith("trained model") for note in again.notes), _notes(again)


@pytest.mark.usefixtures("small_models")
def test_two_threads_fitting_one_group_both_succeed(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two fits of one group (a dashboard session and a benchmark) write the same files at the same moment."""
    installed = _install_development_libraries()
    libraries = [load_library(path) for path in installed.values()]
    model_lock = threading.Lock()  # the membership model's own store is another module's concern
    ensure = learned_builder.ensure_model

    def serialised_ensure(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        with model_lock:
            return ensure(*args, **kwargs)

    monkeypatch.setattr(learned_builder, "ensure_model", serialised_ensure)
    barrier = threading.Barrier(2, timeout=60)
    write_text = Path.write_text

    def write_together(self: Path, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        written = write_text(self, *args, **kwargs)
        if self.name.endswith(".tmp") and ("fitted-" in self.name or "builder-params-" in self.name):
            barrier.wait()  # both writers have written their temporary file before either renames it
        return written

    monkeypatch.setattr(Path, "write_text", write_together)
    errors: list[BaseException] = []
    results: list[api.FittedBuilders] = []

    def fit() -> None:
        try:
            results.append(api.fit_builders(fixture_con.cursor(), None, "elixhauser", libraries))
        except BaseException as error:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=fit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert len(results) == 2 and all(result.training_libraries == [HCC_ID] for result in results)


@pytest.mark.usefixtures("small_models")
def test_a_bundle_whose_model_directory_was_deleted_is_refitted(fixture_con: duckdb.DuckDBPyConnection) -> None:
    installed = _install_development_libraries()
    libraries = [load_library(path) for path in installed.values()]
    first = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert first.model is not None
    models = libraries_dir().parent / "models"
    for directory in models.glob("membership-*"):
        for file in directory.iterdir():
            file.unlink()
        directory.rmdir()
    again = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert again.model is not None and not any(note.startswith("reused the builders") for note in again.notes)
    assert list(models.glob("membership-*")), "the refit did not store its model again"


@pytest.mark.usefixtures("small_models")
def test_a_cohort_nothing_retrieves_is_named_in_each_builders_notes(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """An empty answer is never a silent zero: the report says which cohort had no candidates."""
    _install_development_libraries()
    scored = write_icd_library(
        libraries_dir() / "scored",
        {"hf": TRAIN_COHORTS["hf"], "void": ("Qqxzv wrrpt", ["I50"], True)},
        library_id="charlson-fixture",
        group="charlson",
    )
    report = run_benchmark(fixture_con, scored, ["hf", "void"], methods=BUILDERS)
    for name in BUILDERS:
        void = [r for r in report.results if r.method == name and r.cohort_id == "void"]
        assert void and not void[0].predicted_codes, (name, void)
        notes = report.methods[name].notes
        assert any(note.startswith("void:") and "no candidates" in note for note in notes), (name, notes)
        assert not any(note.startswith("hf:") and "no candidates" in note for note in notes), (name, notes)


def test_a_broken_cohort_file_in_a_development_library_leaves_that_library_out_not_the_benchmark(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """One unreadable cohort file must not stop every benchmark (hybrid included) and every builder search."""
    installed = _install_development_libraries()
    (installed[HCC_ID] / "cohorts" / "pvd.json").write_text("{ broken", encoding="utf-8")
    scored = write_icd_library(
        libraries_dir() / "scored", {"hf": TRAIN_COHORTS["hf"]}, library_id="charlson-fixture", group="charlson"
    )
    report = run_benchmark(fixture_con, scored, ["hf"], methods=["hybrid", "subtree"])
    assert {r.method for r in report.results} == {"hybrid", "subtree"}
    record = report.methods["subtree"]
    assert record.trained_on == [ELIX_ID], record
    assert any("not used for fitting" in note and "pvd.json" in note for note in record.notes), record.notes
    built = set_building.build_for_free_query(fixture_con, "subtree", "heart failure")
    assert built.trained_on == [ELIX_ID] and built.code_list


@pytest.mark.usefixtures("small_models")
def test_a_near_duplicate_without_a_declared_group_is_held_out_with_its_group(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """A Quan Elixhauser whose manifest declares no group still belongs to the Elixhauser group.

    The group rule (``setbuild.groups.library_group``) says so; the builders scoring it must be fitted
    without the Elixhauser libraries, not on them.
    """
    installed = _install_development_libraries()
    quan = write_icd_library(libraries_dir() / "quan", ELIX_COHORTS, library_id="elixhauser-quan-fixture")
    report = run_benchmark(fixture_con, quan, load_library(quan).cohort_ids, methods=BUILDERS)
    for name in BUILDERS:
        assert report.methods[name].trained_on == [HCC_ID], report.methods[name]
    assert installed


@pytest.mark.usefixtures("small_models")
def test_a_cohort_file_edited_by_hand_makes_the_fitted_bundle_stale(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """The manifest does not change when a cohort's codes are edited in place; the fit must still be redone."""
    installed = _install_development_libraries()
    libraries = [load_library(path) for path in installed.values()]
    context_libraries = {lib.library_id: lib for lib in libraries}
    api.fit_builders(fixture_con, None, "elixhauser", libraries)
    before = api.library_stamp(context_libraries[HCC_ID])
    swapped = {"dm1": ("Type 1 diabetes mellitus", ["E11"], True), "dm2": ("Type 2 diabetes mellitus", ["E10"], True)}
    write_icd_library(installed[HCC_ID], {**TRAIN_COHORTS, **swapped}, library_id=HCC_ID, group="cms-hcc")
    libraries = [load_library(path) for path in installed.values()]
    assert libraries[0].manifest == context_libraries[HCC_ID].manifest  # only the cohort files changed
    assert api.library_stamp(libraries[0]) != before
    again = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert not any(note.startswith("reused") for note in again.notes), _notes(again)


def test_a_run_at_another_dense_weight_says_the_builders_fuse_at_their_fitted_weight(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """Hybrid follows --dense-weight; the builders cannot (they were fitted at one weight) and must say so."""
    _install_development_libraries()
    scored = write_icd_library(
        libraries_dir() / "scored", {"hf": TRAIN_COHORTS["hf"]}, library_id="charlson-fixture", group="charlson"
    )
    report = run_benchmark(fixture_con, scored, ["hf"], methods=BUILDERS, dense_weight=0.8)
    for name in BUILDERS:
        notes = " ".join(report.methods[name].notes)
        assert "dense weight 0.5" in notes and "0.8" in notes, (name, notes)
    same = run_benchmark(fixture_con, scored, ["hf"], methods=["subtree"], dense_weight=0.5)
    assert not any("dense weight" in note for note in same.methods["subtree"].notes)


@pytest.mark.usefixtures("small_models")
def test_a_copied_development_library_declaring_another_group_is_still_held_out_with_its_family(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """A hand-copied 'cms-hcc-v28-old' declaring group 'old' is still a CMS-HCC library: it may not train
    the builders that score CMS-HCC."""
    installed = _install_development_libraries()
    write_icd_library(libraries_dir() / "old", TRAIN_COHORTS, library_id="cms-hcc-v28-old", group="old")
    report = run_benchmark(fixture_con, installed[HCC_ID], load_library(installed[HCC_ID]).cohort_ids, ["subtree"])
    assert report.methods["subtree"].trained_on == [ELIX_ID], report.methods["subtree"]


class _CountingDense:
    """A dense retriever whose ranking is prefix-stable with ties, counting every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def ranking(self, query: str, n: int) -> list[tuple[str, float]]:
        self.calls.append((query, n))
        codes = ["I50", "I50.9", "I50.2", "I50.21", "I50.22", "J45", "J45.9", "E11", "E10", "I48"]
        return [(code, 1.0 - (rank // 2) / 10) for rank, code in enumerate(codes)][:n]


def test_the_shared_rankings_serve_a_shallow_request_after_a_deep_one_from_one_query(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    dense = _CountingDense()
    retrieval = Retrieval(fixture_con, dense, depth=4)
    shallow = retrieval.dense_ranking("heart failure")
    assert shallow is not None and len(shallow) == 4
    deep = retrieval.dense_ranking("heart failure", 1000)
    assert deep is not None and deep[:4] == shallow
    assert retrieval.dense_ranking("heart failure", 2) == shallow[:2]
    retrieval.prefetch(["heart failure"], depth=50)
    assert dense.calls == [("heart failure", 4), ("heart failure", 1000)]
    bm25_shallow = retrieval.bm25("heart failure", 3)
    assert retrieval.bm25("heart failure", 1000)[:3] == bm25_shallow
    assert retrieval.bm25("heart failure") == retrieval.bm25("heart failure", 1000)[:4]


def test_the_process_cache_notices_a_library_reimported_at_the_same_path(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    installed = _install_development_libraries()
    cohorts = load_library(installed[ELIX_ID]).cohort_ids
    first = run_benchmark(fixture_con, installed[ELIX_ID], cohorts, methods=["subtree"])
    assert first.methods["subtree"].trained_on == [HCC_ID]
    # the user replaces the HCC folder with their own import of the same name
    write_icd_library(installed[HCC_ID], TRAIN_COHORTS, library_id=HCC_ID, group="cms-hcc")
    library = load_library(installed[HCC_ID])
    library.manifest.report = {"build": {"imported_from": "/home/me/hcc.csv"}}
    (installed[HCC_ID] / "manifest.json").write_text(library.manifest.model_dump_json(indent=1), encoding="utf-8")
    again = run_benchmark(fixture_con, installed[ELIX_ID], cohorts, methods=["subtree"])
    assert again.methods["subtree"].trained_on == [], again.methods["subtree"]


@pytest.mark.usefixtures("small_models")
def test_an_import_declaring_a_bundled_group_or_taking_a_bundled_id_is_never_scored_by_that_group(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    installed = _install_development_libraries()
    mine = write_icd_library(libraries_dir() / "mine", TRAIN_COHORTS, library_id="my-hcc", group="cms-hcc")
    report = run_benchmark(fixture_con, mine, load_library(mine).cohort_ids, methods=BUILDERS)
    assert all(report.methods[name].trained_on == [ELIX_ID] for name in BUILDERS), report.methods
    # a copy that took the bundled library's id (so `list_libraries` skips it) and declares its own group
    clash = write_icd_library(libraries_dir() / "zz-clash", TRAIN_COHORTS, library_id=HCC_ID, group="mine")
    report = run_benchmark(fixture_con, clash, load_library(clash).cohort_ids, methods=BUILDERS)
    # its id's family (cms-hcc) is held out beside its declared group: scored by builders fitted without it
    assert report.results, report.skipped
    assert all(report.methods[name].trained_on == [ELIX_ID] for name in BUILDERS), report.methods
    assert installed


@pytest.mark.usefixtures("small_models")
def test_a_bundle_naming_a_model_outside_the_models_directory_is_refitted(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """A tampered bundle must not make phenoforge unpickle a model from wherever it points."""
    installed = _install_development_libraries()
    libraries = [load_library(path) for path in installed.values()]
    api.fit_builders(fixture_con, None, "elixhauser", libraries)
    models = libraries_dir().parent / "models"
    model_dir = next(models.glob("membership-*"))
    outside = models.parent / "elsewhere"
    outside.mkdir()
    model_dir.rename(outside / model_dir.name)
    bundle = next(models.glob("fitted-*.json"))
    stored = json.loads(bundle.read_text(encoding="utf-8"))
    stored["model_directory"] = f"../elsewhere/{model_dir.name}"
    bundle.write_text(json.dumps(stored), encoding="utf-8")
    again = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert not any(note.startswith("reused the builders") for note in again.notes), _notes(again)
    assert again.model is not None

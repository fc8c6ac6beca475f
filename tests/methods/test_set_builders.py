"""The set builders as registered methods: fitted without the scored group, billable lists with provenance.

Two development libraries of different groups (named like the bundled ones, so they count as
development libraries) and one test library are installed in the test's data directory; the
benchmark of each must use builders fitted on the *other* group only.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

import phenoforge.setbuild.builders.learned as learned_builder
from phenoforge.config import libraries_dir
from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import available_methods, set_builder_fits, set_building
from phenoforge.methods.base import MethodContext
from phenoforge.methods.retrieval import Retrieval
from phenoforge.setbuild import api, learned, transfer
from phenoforge.setbuild.groups import library_group
from phenoforge.setbuild.models import BuiltSet
from tests.fixture_library import write_icd_library
from tests.setbuild.conftest import OTHER_COHORTS, TRAIN_COHORTS

BUILDERS = ["adaptive_cutoff", "subtree", "learned", "curated_transfer"]
HCC_ID = "cms-hcc-v28-fixture"
ELIX_ID = "elixhauser-2026-fixture"
TEST_ID = "charlson-fixture"
SMALL = {"min_cohorts": 3, "min_positives": 5}


@pytest.fixture
def installed(tmp_path: Path) -> dict[str, Path]:
    """Three libraries in the (per-test) data directory: two development groups and a test library."""
    set_building.clear_fitted()
    root = libraries_dir()
    return {
        HCC_ID: write_icd_library(root / "hcc", TRAIN_COHORTS, library_id=HCC_ID, group="cms-hcc"),
        ELIX_ID: write_icd_library(
            root / "elix",
            {**OTHER_COHORTS, "dm2": TRAIN_COHORTS["dm2"], "af": TRAIN_COHORTS["af"]},
            library_id=ELIX_ID,
            group="elixhauser",
        ),
        TEST_ID: write_icd_library(root / "test", {"hf": TRAIN_COHORTS["hf"]}, library_id=TEST_ID, group="charlson"),
    }


@pytest.fixture
def small_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the fixture's handful of cohorts train a membership model (the real minimum is larger)."""
    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **SMALL))


def _benchmark(con: duckdb.DuckDBPyConnection, library: Path, methods: list[str]):  # noqa: ANN202
    return run_benchmark(con, library, load_library(library).cohort_ids, methods=methods)


def test_the_three_builders_are_registered_with_their_needs() -> None:
    methods = available_methods(include_entry_points=False)
    for name in BUILDERS:
        assert name in methods
        assert methods[name].uses == frozenset({"dense"}) and methods[name].setup is not None
        assert methods[name].depth is not None and methods[name].depth > 100


@pytest.mark.usefixtures("small_models")
def test_each_library_is_scored_by_builders_fitted_without_its_group(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path]
) -> None:
    expected = {HCC_ID: [ELIX_ID], ELIX_ID: [HCC_ID], TEST_ID: sorted([ELIX_ID, HCC_ID])}
    for library_id, trained_on in expected.items():
        report = _benchmark(fixture_con, installed[library_id], BUILDERS)
        for name in BUILDERS:
            record = report.methods[name]
            assert record.trained_on == trained_on, (library_id, name, record)
            assert library_id not in record.trained_on
        assert {r.method for r in report.results} == set(BUILDERS)
    # the HCC library's 10 cohorts train a real model for the Elixhauser library
    report = _benchmark(fixture_con, installed[ELIX_ID], ["learned"])
    assert report.methods["learned"].degraded is None or "dense" in report.methods["learned"].degraded


@pytest.mark.usefixtures("small_models")
def test_builders_fitted_on_the_scored_library_never_score_it(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The no-leakage pin: a fit that ignores the held-out group (a bug) must not produce scores."""
    leaky = functools.partial(api.fit_builders, held_out_group=None)

    def fit_ignoring_the_held_out_group(con, dense, held_out_group=None, libraries=None, progress=None, **_ignored):  # noqa: ANN001, ANN003, ANN202
        return leaky(con, dense, libraries=libraries, progress=progress)

    monkeypatch.setattr(set_builder_fits, "fit_builders", fit_ignoring_the_held_out_group)
    report = _benchmark(fixture_con, installed[HCC_ID], BUILDERS)
    assert not report.results, "a builder fitted on the scored library produced scores"
    for name in BUILDERS:
        notes = " ".join(report.methods[name].notes)
        assert "skipped" in notes and HCC_ID in notes and "may not score" in notes


QUAN_CHARLSON_ID = "charlson-quan-fixture"
QUAN_ELIX_ID = "elixhauser-quan-fixture"


@pytest.fixture
def with_quan(installed: dict[str, Path]) -> dict[str, Path]:
    """The development libraries plus two libraries named like the bundled Quan ones (training libraries)."""
    root = libraries_dir()
    return {
        **installed,
        QUAN_CHARLSON_ID: write_icd_library(
            root / "quan-charlson",
            {"chf": TRAIN_COHORTS["hf"], "asthma": TRAIN_COHORTS["asthma"], "dm": TRAIN_COHORTS["dm2"]},
            library_id=QUAN_CHARLSON_ID,
            group="charlson",
        ),
        QUAN_ELIX_ID: write_icd_library(
            root / "quan-elix",
            {"chf": OTHER_COHORTS["x-hf"], "obese": TRAIN_COHORTS["obesity"], "af": TRAIN_COHORTS["af"]},
            library_id=QUAN_ELIX_ID,
            group="elixhauser",
        ),
    }


@pytest.mark.usefixtures("small_models")
def test_the_quan_libraries_train_other_groups_builders_and_never_their_own(
    fixture_con: duckdb.DuckDBPyConnection, with_quan: dict[str, Path]
) -> None:
    """Every bundled library trains the builders of the *other* groups: the HCC library is scored by
    builders fitted on both Quan libraries too, and a Quan library never by builders fitted on its group."""
    expected = {
        HCC_ID: sorted([ELIX_ID, QUAN_CHARLSON_ID, QUAN_ELIX_ID]),
        QUAN_CHARLSON_ID: sorted([ELIX_ID, HCC_ID, QUAN_ELIX_ID]),
        QUAN_ELIX_ID: sorted([HCC_ID, QUAN_CHARLSON_ID]),
        TEST_ID: sorted([ELIX_ID, HCC_ID, QUAN_ELIX_ID]),
    }
    for library_id, trained_on in expected.items():
        report = _benchmark(fixture_con, with_quan[library_id], BUILDERS)
        for name in BUILDERS:
            assert report.methods[name].trained_on == trained_on, (library_id, name, report.methods[name])
        assert {r.method for r in report.results} == set(BUILDERS)
    model = set_building.fitted_for(_context(fixture_con, with_quan[QUAN_ELIX_ID])).model
    assert model is not None and not {QUAN_ELIX_ID, ELIX_ID} & set(model.manifest.training_libraries)
    assert "elixhauser" not in model.manifest.training_groups


@pytest.mark.usefixtures("small_models")
def test_a_quan_library_is_never_scored_by_a_model_that_trained_on_it(
    fixture_con: duckdb.DuckDBPyConnection, with_quan: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The no-leakage pin for the Quan libraries: a fit that ignores the held-out group (a bug) trains on
    the scored Quan library, and its builders must then refuse to score it."""
    leaky = functools.partial(api.fit_builders, held_out_group=None)

    def fit_ignoring_the_held_out_group(con, dense, held_out_group=None, libraries=None, progress=None, **_ignored):  # noqa: ANN001, ANN003, ANN202
        return leaky(con, dense, libraries=libraries, progress=progress)

    monkeypatch.setattr(set_builder_fits, "fit_builders", fit_ignoring_the_held_out_group)
    for library_id in (QUAN_CHARLSON_ID, QUAN_ELIX_ID):
        set_building.clear_fitted()
        report = _benchmark(fixture_con, with_quan[library_id], BUILDERS)
        assert not report.results, f"a builder fitted on {library_id} produced scores for it"
        for name in BUILDERS:
            notes = " ".join(report.methods[name].notes)
            assert "skipped" in notes and library_id in notes and "may not score" in notes


def _context(con: duckdb.DuckDBPyConnection, library: Path) -> MethodContext:
    loaded = load_library(library)
    return MethodContext(
        con=con,
        hierarchy=get_hierarchy(con),
        retrieval=Retrieval(con, None, 100),
        library_id=loaded.library_id,
        library_group=library_group(loaded.manifest),
        library_path=str(library),
    )


@pytest.mark.usefixtures("small_models")
def test_builders_answer_billable_codes_each_with_why(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path]
) -> None:
    hierarchy = get_hierarchy(fixture_con)
    report = _benchmark(fixture_con, installed[ELIX_ID], BUILDERS)
    answered = [r for r in report.results if r.predicted_codes]
    assert answered, "no builder answered any cohort"
    for result in answered:
        for code in result.predicted_codes:
            node = hierarchy.resolve(code)
            assert node is not None and hierarchy.billable[node], (result.method, code)
            why = result.provenance.get(code, [])
            assert why and " via " in why[0], (result.method, code, why)


@pytest.mark.usefixtures("small_models")
def test_hybrid_is_unchanged_when_set_builders_deepen_the_shared_rankings(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path]
) -> None:
    """Set builders read rankings 1000 deep; hybrid must still fuse at its own depth."""
    alone = _benchmark(fixture_con, installed[HCC_ID], ["hybrid"])
    beside = _benchmark(fixture_con, installed[HCC_ID], ["hybrid", "subtree"])
    hybrid_beside = [r for r in beside.results if r.method == "hybrid"]
    assert [r.predicted_codes for r in alone.results] == [r.predicted_codes for r in hybrid_beside]


@pytest.mark.usefixtures("small_models")
def test_a_fitted_bundle_is_reused_and_refitted_when_corrupt_or_stale(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path]
) -> None:
    libraries = [load_library(path) for path in installed.values()]
    first = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert first.training_libraries == [HCC_ID] and first.model is not None
    assert not any(note.startswith("reused the builders") for note in first.notes)
    again = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert any(note.startswith("reused the builders") for note in again.notes)
    assert again.states()["adaptive_cutoff"] == first.states()["adaptive_cutoff"] and again.model is not None
    bundles = sorted((libraries_dir().parent / "models").glob("fitted-*.json"))
    assert len(bundles) == 1
    bundles[0].write_text("{ not json", encoding="utf-8")
    refitted = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert not any(note.startswith("reused the builders") for note in refitted.notes)
    assert any(note.endswith("is corrupt: refitted") for note in refitted.notes)
    # the model file changed under the bundle: its checksum no longer matches, so it is refitted
    model_dir = next((libraries_dir().parent / "models").glob("membership-*"))
    (model_dir / learned.MODEL_FILE).write_bytes(b"tampered")
    after = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert not any(note.startswith("reused the builders") for note in after.notes)
    assert any("membership model is unusable" in note and "checksum" in note for note in after.notes)
    assert after.model is not None


@pytest.mark.usefixtures("small_models", "installed")
def test_a_free_query_gets_a_set_fitted_on_every_development_library(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    built = set_building.build_for_free_query(fixture_con, "subtree", "heart failure")
    assert built.trained_on == sorted([ELIX_ID, HCC_ID])
    assert built.code_list and all(code.startswith("I50") for code in built.code_list)
    with pytest.raises(ValueError, match="unknown set builder"):
        set_building.build_for_free_query(fixture_con, "top_k", "heart failure")


def test_an_empty_bm25_answer_says_why(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """The benchmark table listed bm25's empty answer to 'Psychoses' with 'no reason given'."""
    library = write_icd_library(tmp_path / "lib", {"x": ("Xylophonia", ["J45"], True)}, library_id="words-lib")
    report = _benchmark(fixture_con, library, ["bm25"])
    (result,) = report.results
    assert result.predicted_codes == []
    assert any(note.startswith("x: ") and "shares a word" in note for note in report.methods["bm25"].notes)


def _visible_groups(view: transfer.KnowledgeView | None) -> set[str]:
    return {group for cohort in (view.cohorts if view is not None else []) for group in cohort.groups}


@pytest.mark.usefixtures("small_models")
def test_no_cohort_is_informed_by_its_own_groups_curated_lists(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every transfer-feature computation, in training and in scoring, sees the other groups only.

    Scoring Elixhauser: the model trains on the CMS-HCC cohorts, whose features may see neither
    CMS-HCC (their own lists) nor Elixhauser (the held-out group); the scored cohorts may not see Elixhauser.
    """
    calls: list[tuple[str, set[str]]] = []
    original = transfer.transfer_features

    def spy(hierarchy, table, view):  # noqa: ANN001, ANN202
        calls.append((table.query, _visible_groups(view)))
        return original(hierarchy, table, view)

    monkeypatch.setattr(transfer, "transfer_features", spy)
    monkeypatch.setattr(learned, "transfer_features", spy)
    report = _benchmark(fixture_con, installed[ELIX_ID], ["learned"])
    assert report.results and report.methods["learned"].trained_on == [HCC_ID]
    elix_names = {name for name, _codes, _desc in load_library_cohorts(installed[ELIX_ID])}
    hcc_names = {name for name, _codes, _desc in TRAIN_COHORTS.values()}
    training = [(query, groups) for query, groups in calls if query in hcc_names - elix_names]
    scoring = [(query, groups) for query, groups in calls if query in elix_names - hcc_names]
    assert training and scoring, "the transfer features were never computed"
    for query, groups in calls:
        assert "elixhauser" not in groups, (query, groups)
    for query, groups in training:
        assert "cms-hcc" not in groups, (query, groups)
        assert "charlson" in groups, (query, groups)
    assert all("cms-hcc" in groups for _query, groups in scoring), "the scored group saw no other group"


def load_library_cohorts(path: Path) -> list[tuple[str, list[str], bool]]:
    library = load_library(path)
    return [(library.cohort(cid).cohort_name, [], True) for cid in library.cohort_ids]


@pytest.mark.usefixtures("small_models")
def test_a_knowledge_view_that_ignores_the_exclusions_never_scores(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The no-leakage pin for the curated knowledge: a view that forgets its exclusions (a bug) is refused."""

    def leaky_view(self: transfer.CuratedKnowledge, excluded: object) -> transfer.KnowledgeView:
        return transfer.KnowledgeView(self, frozenset(), np.ones(len(self.cohorts), dtype=bool))

    monkeypatch.setattr(transfer.CuratedKnowledge, "view", leaky_view)
    report = _benchmark(fixture_con, installed[ELIX_ID], BUILDERS)
    assert not report.results, "a builder informed by the scored group's own curated lists produced scores"
    for name in BUILDERS:
        notes = " ".join(report.methods[name].notes)
        assert "skipped" in notes and "own library group" in notes, notes


@pytest.mark.usefixtures("small_models")
def test_learned_codes_name_the_other_groups_cohort_that_lists_them(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path]
) -> None:
    report = _benchmark(fixture_con, installed[ELIX_ID], ["learned"])
    (chf,) = [r for r in report.results if r.cohort_id == "x-hf"]
    whys = [why for code in chf.predicted_codes for why in chf.provenance.get(code, [])]
    listed = [why for why in whys if "listed by curated cohort" in why]
    assert listed, whys
    assert all(f"{HCC_ID}/hf" in why or f"{TEST_ID}/hf" in why for why in listed), listed
    assert not any(ELIX_ID in why for why in whys)


@pytest.mark.usefixtures("small_models")
def test_an_imported_library_is_scored_with_every_bundled_group_as_knowledge(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path]
) -> None:
    imported = write_icd_library(
        libraries_dir() / "mine", {"hf": TRAIN_COHORTS["hf"]}, library_id="my-heart-lists", group="mine"
    )
    manifest = json.loads((imported / "manifest.json").read_text(encoding="utf-8"))
    manifest["report"] = {"build": {"imported_from": "/tmp/my-heart-lists.csv"}}
    (imported / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    libraries = [load_library(path) for path in [*installed.values(), imported]]
    fitted = api.fit_builders(fixture_con, None, "mine", libraries)
    assert fitted.knowledge is not None
    assert {"cms-hcc", "elixhauser", "charlson"} <= _visible_groups(fitted.knowledge)
    assert all(cohort.library_id != "my-heart-lists" for cohort in fitted.knowledge.knowledge.cohorts)
    # a bundled library's builders never see their own group
    elix = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert elix.knowledge is not None
    assert "elixhauser" not in _visible_groups(elix.knowledge)
    assert {"cms-hcc", "charlson"} <= _visible_groups(elix.knowledge)


@pytest.mark.usefixtures("small_models")
def test_curated_transfer_takes_a_matched_list_with_its_source_else_the_learned_set(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path]
) -> None:
    libraries = [load_library(path) for path in installed.values()]
    fitted = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    hierarchy = get_hierarchy(fixture_con)
    tuned = transfer.TransferParams(min_similarity=0.7, trained_on=[HCC_ID])
    fitted.builders["curated_transfer"].params_ = tuned  # type: ignore[attr-defined]
    ranking = [("I50.9", 3.0), ("I50", 2.0)]
    built = _build_ranked(
        hierarchy, "curated_transfer", "Congestive heart failure", ranking, None, fitted, ELIX_ID, "elixhauser"
    )
    assert built.code_list and all(code.startswith("I50") for code in built.code_list)
    sources = {item.provenance.rule.split(" '")[0] for item in built.codes}
    assert sources <= {f"listed by curated cohort {HCC_ID}/hf", f"listed by curated cohort {TEST_ID}/hf"}, sources
    assert all(item.provenance.source == "curated" for item in built.codes)
    # nothing matches "Xylophonia": the learned set answers, and says why
    learned_set = _build_ranked(hierarchy, "learned", "Xylophonia", [("J45", 1.0)], None, fitted, ELIX_ID, "elixhauser")
    fallback = _build_ranked(
        hierarchy, "curated_transfer", "Xylophonia", [("J45", 1.0)], None, fitted, ELIX_ID, "elixhauser"
    )
    assert fallback.code_list == learned_set.code_list
    assert any("the learned set" in note for note in fallback.notes)


@pytest.mark.usefixtures("small_models")
def test_learned_and_curated_transfer_build_the_learned_set_once_per_cohort(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A benchmark with both ran the learned features twice per cohort (half its set-building time);
    sharing the set must not change either method's answer, in either order."""
    library = installed[ELIX_ID]
    alone = {name: _benchmark(fixture_con, library, [name]) for name in ("learned", "curated_transfer")}
    calls: list[str] = []
    counted = learned.build_learned

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(args[1] if len(args) > 1 else "")
        return counted(*args, **kwargs)

    monkeypatch.setattr(learned_builder, "build_learned", counting)
    for order in (["curated_transfer", "learned"], ["learned", "curated_transfer"]):
        calls.clear()
        both = _benchmark(fixture_con, library, order)
        cohorts = len(load_library(library).cohort_ids)
        assert 0 < len(calls) <= cohorts, (order, len(calls), cohorts)
        for name, report in alone.items():
            mine = [(r.cohort_id, r.predicted_codes, r.provenance) for r in both.results if r.method == name]
            assert mine == [(r.cohort_id, r.predicted_codes, r.provenance) for r in report.results], (order, name)


def _build_ranked(
    hierarchy: Hierarchy,
    method: str,
    query: str,
    bm25: list[tuple[str, float]],
    dense: list[tuple[str, float]] | None,
    fitted: api.FittedBuilders,
    scored_library_id: str | None = None,
    scored_group: str | None = None,
) -> BuiltSet:
    """One builder's set for rankings, as the benchmark builds it: their candidate table, then the builder."""
    table = api.candidate_table(hierarchy, query, bm25, dense)
    return api.build_set(hierarchy, fitted, method, table, scored_library_id, scored_group)


@pytest.mark.usefixtures("small_models")
@pytest.mark.parametrize("edit", ["drop the model", "change a parameter", "drop the digest"])
def test_an_edited_fitted_bundle_is_refitted_not_blamed_on_training_data(
    fixture_con: duckdb.DuckDBPyConnection, installed: dict[str, Path], edit: str
) -> None:
    """A bundle edited by hand once named no model and was reported as 'too little training data'."""
    libraries = [load_library(path) for path in installed.values()]
    assert api.fit_builders(fixture_con, None, "elixhauser", libraries).model is not None
    (bundle,) = (libraries_dir().parent / "models").glob("fitted-*.json")
    stored = json.loads(bundle.read_text(encoding="utf-8"))
    if edit == "drop the model":
        stored["states"]["learned"]["model_directory"] = None
    elif edit == "change a parameter":
        stored["notes"] = [*stored["notes"], "edited by hand"]
    else:
        stored.pop("digest", None)
        stored["states"]["learned"]["model_directory"] = None
    bundle.write_text(json.dumps(stored), encoding="utf-8")
    again = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert not any(note.startswith("reused the builders") for note in again.notes), again.notes
    assert any(bundle.name in note and "edited" in note for note in again.notes), again.notes
    assert again.model is not None  # what the 'too little training data' fallback is decided on

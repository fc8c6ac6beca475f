"""The set builders attacked a fourth time: copies that train the model, false reasons, broken model stores.

Each test pins one way a set builder scored a cohort it was fitted on, told the user something
untrue about why a code is in its list, or crashed where it should have said what went wrong.
"""

from __future__ import annotations

import errno
import functools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

import phenoforge.setbuild.builders.learned as learned_builder
from phenoforge.config import libraries_dir
from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import set_building
from phenoforge.methods.base import MethodContext
from phenoforge.methods.retrieval import Retrieval
from phenoforge.setbuild import api
from phenoforge.setbuild.candidates import RETRIEVAL_DEPTH
from phenoforge.setbuild.learned import TrainingDataTooSmall
from tests.fixture_library import write_icd_library
from tests.methods.test_set_builders_reuse_and_copies import (
    BUILDERS,
    ELIX_ID,
    HCC_ID,
    SMALL,
    _install_development_libraries,
)
from tests.methods.test_transfer_leakage import _mark_imported
from tests.setbuild.conftest import TRAIN_COHORTS


@pytest.fixture(autouse=True)
def _fresh_process_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    set_building.clear_fitted()
    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **SMALL))


def test_an_imported_copy_of_a_development_library_is_not_scored_by_builders_fitted_on_it(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """Hiding the copied lists from the knowledge is not enough: the model and the tuned parameters
    were fitted on those very cohorts, so they must be fitted without the copied library's group too."""
    _install_development_libraries()
    only_hcc = {cid: TRAIN_COHORTS[cid] for cid in ("pvd", "femur", "obesity")}  # no Elixhauser cohort lists these
    copy = write_icd_library(libraries_dir() / "mine", only_hcc, library_id="my-conditions")
    _mark_imported(copy)
    report = run_benchmark(fixture_con, copy, load_library(copy).cohort_ids, methods=BUILDERS)
    for name in BUILDERS:
        record = report.methods[name]
        assert record.trained_on == [ELIX_ID], (name, record.trained_on)
        assert any("cms-hcc" in note and "exactly their codes" in note for note in record.notes), record.notes


def test_a_fitted_bundle_half_written_by_a_killed_process_is_removed_by_the_next_fit(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL skips ``finally``: the tuned parameters' and the bundle's temporaries stayed forever
    (a fit without a membership model to store never passed the model writer's clean-up)."""

    def too_small(*_args: object, **_kwargs: object) -> None:
        raise TrainingDataTooSmall("too few cohorts")

    monkeypatch.setattr(learned_builder, "ensure_model", too_small)
    installed = _install_development_libraries()
    models = libraries_dir().parent / "models"
    models.mkdir(parents=True, exist_ok=True)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftovers = [
        models / f".fitted-0123456789abcdef.json.{int(child.stdout)}.0123abcd.tmp",
        models / f".builder-params-0123456789ab.json.{int(child.stdout)}.4567cdef.tmp",
    ]
    for leftover in leftovers:
        leftover.write_text('{"signature": "half', encoding="utf-8")
    api.fit_builders(fixture_con, None, "elixhauser", [load_library(path) for path in installed.values()])
    assert not [leftover for leftover in leftovers if leftover.exists()]
    assert list(models.glob("fitted-*.json")) and list(models.glob("builder-params-*.json"))


def _models_folder_is_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    models = libraries_dir().parent / "models"
    models.parent.mkdir(parents=True, exist_ok=True)
    models.write_text("not a folder", encoding="utf-8")


def _models_folder_is_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a read-only mount (or another user's folder) does to every write under data/models."""
    original = Path.write_text

    def refuse(self: Path, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if self.parent.name == "models" or self.parent.parent.name == "models":
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", refuse)
    monkeypatch.setattr(Path, "write_bytes", refuse)


@pytest.mark.parametrize("break_store", [_models_folder_is_a_file, _models_folder_is_read_only])
def test_a_models_folder_that_cannot_be_written_fits_in_memory_and_says_so(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch, break_store: Callable[..., None]
) -> None:
    """data/models unreadable or unwritable raised NotADirectoryError/OSError out of the whole benchmark
    (hybrid included); the builders can still be fitted for the run, and the report says nothing was kept."""
    installed = _install_development_libraries()
    break_store(monkeypatch)
    report = run_benchmark(fixture_con, installed[ELIX_ID], ["x-hf"], methods=["hybrid", *BUILDERS])
    assert {r.method for r in report.results} == {"hybrid", *BUILDERS}
    for name in BUILDERS:
        record = report.methods[name]
        assert record.trained_on == [HCC_ID], (name, record)
        assert any("not stored" in note for note in record.notes), (name, record.notes)
    assert report.methods["learned"].degraded is None or "membership model" not in report.methods["learned"].degraded
    # `search` prints the set's notes, not the fit's: a search refitting minutes each time must say why
    set_building.clear_fitted()
    built = set_building.build_for_free_query(fixture_con, "learned", "heart failure")
    assert built.code_list and any("not stored" in note for note in built.notes), built.notes


@pytest.mark.parametrize("builder", BUILDERS)
def test_a_code_typed_as_the_query_builds_the_set_of_its_name_and_says_so(
    fixture_con: duckdb.DuckDBPyConnection, builder: str
) -> None:
    """'I50.9' searched as text matched hypertensive heart disease and BMI codes (the digits), silently."""
    _install_development_libraries()
    hierarchy = get_hierarchy(fixture_con)
    for typed in ["I50", " i50.2 ", "I502"]:
        name = hierarchy.name[hierarchy.resolve(typed.strip())]
        by_code = set_building.build_for_free_query(fixture_con, builder, typed)
        by_name = set_building.build_for_free_query(fixture_con, builder, name)
        assert by_code.code_list and by_code.code_list == by_name.code_list, (typed, by_code.code_list)
        assert by_code.query == typed
        assert any("is the code" in note and name in note for note in by_code.notes), by_code.notes
        assert not any("is the code" in note for note in by_name.notes)


def test_a_development_library_that_gave_no_training_cohort_is_not_reported_as_trained_on(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """A development library none of whose codes resolve taught the builders nothing: the report said
    'trained on' it (and the rule builders looked tuned) while the notes said 'default parameters (untuned)'."""
    write_icd_library(
        libraries_dir() / "hcc", {"z": ("Heart failure", ["Q99.99"], True)}, library_id=HCC_ID, group="cms-hcc"
    )
    scored = write_icd_library(
        libraries_dir() / "scored", {"hf": TRAIN_COHORTS["hf"]}, library_id=ELIX_ID, group="elixhauser"
    )
    report = run_benchmark(fixture_con, scored, ["hf"], methods=BUILDERS)
    for name in BUILDERS:
        record = report.methods[name]
        assert record.trained_on == [], (name, record.trained_on)
        assert record.degraded and "untuned" in record.degraded, (name, record.degraded)
        assert any(HCC_ID in note and "not used for fitting" in note for note in record.notes), record.notes


def test_an_imported_library_reuses_the_fit_every_free_query_uses(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """Holding out a group no installed library or curated cohort belongs to changes nothing, yet each
    imported library was fitted (and its membership model trained) again: minutes per import on the
    bundled data, and again for each re-import."""
    installed = _install_development_libraries()
    mine = write_icd_library(libraries_dir() / "mine", {"own": ("Obesity", ["E66"], True)}, library_id="my-import")
    _mark_imported(mine)
    libraries = [load_library(path) for path in [*installed.values(), mine]]
    free = api.fit_builders(fixture_con, None, None, libraries)
    assert free.model is not None
    imported = api.fit_builders(fixture_con, None, "my-import", libraries, also_held_out=["my-family"])
    assert any(note.startswith("reused the builders") for note in imported.notes), imported.notes
    assert imported.training_libraries == free.training_libraries
    imported.check_may_score("my-import", "my-import")
    held = api.fit_builders(fixture_con, None, "cms-hcc", libraries)  # a group that is installed still refits
    assert held.training_libraries == [ELIX_ID]


@pytest.mark.parametrize("typed", ["Z99.999", "z99999", "428.0", "E849.0"])
def test_a_code_the_vocabulary_lacks_answers_nothing_and_says_why(
    fixture_con: duckdb.DuckDBPyConnection, typed: str
) -> None:
    """An ICD-9 code or a mistyped ICD-10-CM code matched score codes (NIHSS, BMI) by its digits, silently."""
    for builder in BUILDERS:
        built = set_building.build_for_free_query(fixture_con, builder, typed)
        assert not built.codes, (builder, built.code_list)
        assert built.notes and "not an ICD-10-CM code" in built.notes[0], built.notes


def test_words_in_another_script_beside_english_ones_are_named_as_ignored(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """'heart недостаточность' was answered as 'heart' alone (330 heart-injury codes on the bundled data), silently."""
    context = MethodContext(
        con=fixture_con, hierarchy=get_hierarchy(fixture_con), retrieval=Retrieval(fixture_con, None, RETRIEVAL_DEPTH)
    )
    fitted = set_building.fitted_for(context)
    for builder in ["subtree", "curated_transfer", "learned"]:  # learned after transfer: served the shared set
        built = set_building.build_for(context, builder, "Heart failure сердечная", fitted)
        assert built.codes, builder
        assert any("сердечная" in note and "ignored" in note for note in built.notes), (builder, built.notes)
    plain = set_building.build_for_free_query(fixture_con, "subtree", "Heart failure")
    assert not any("ignored" in note for note in plain.notes), plain.notes

"""Shipped set-builder fits: installed on a fresh build of the same inputs, never for other code or data."""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.curated import Library, load_library
from phenoforge.setbuild import shipped_fits
from phenoforge.setbuild.api import FitRefused, FittedBuilders, fit_builders, fits_refused
from phenoforge.setbuild.builders import learned as learned_builder
from phenoforge.setbuild.model_store import ensure_model
from phenoforge.setbuild.ship import pack_shipped_fits
from phenoforge.setbuild.shipped_fits import (
    ShippedFitsError,
    library_content_stamp,
    read_archive,
    read_manifest,
)
from tests.fixture_vocab import build_fixture_vocab
from tests.setbuild.conftest import SMALL

HELD_OUT = "fixture-other"


def _small_fixture_training(patch: pytest.MonkeyPatch) -> None:
    patch.setattr("phenoforge.setbuild.api.is_training_library", lambda manifest: True)
    # the fixture library is small: let it train both membership models, so they are shipped too
    patch.setattr(
        learned_builder,
        "ensure_model",
        partial(ensure_model, min_cohorts=SMALL["min_cohorts"], min_positives=SMALL["min_positives"]),
    )


@pytest.fixture(scope="session")
def packed_fixture_fit(
    fixture_con: duckdb.DuckDBPyConnection, libraries_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[FittedBuilders, Path]:
    """The fixture's fit without ``fixture-other``, packed once per session as ``scripts/ship_fits.py`` packs
    the real ones (in a data folder of its own)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path_factory.mktemp("shipped-fit-data")))
        _small_fixture_training(patch)
        libraries = [load_library(libraries_root / "train"), load_library(libraries_root / "other")]
        fitted = fit_builders(fixture_con, None, HELD_OUT, libraries)
        out = tmp_path_factory.mktemp("shipped")
        pack_shipped_fits(fixture_con, None, libraries, [(HELD_OUT, ())], out, say=lambda _message: None)
    return fitted, out


@pytest.fixture
def shipped(
    packed_fixture_fit: tuple[FittedBuilders, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[FittedBuilders, Path]:
    """The packed fixture fit, copied for this test (which may damage it) and installed from."""
    fitted, packed = packed_fixture_fit
    out = tmp_path / "shipped"
    shutil.copytree(packed, out)
    _small_fixture_training(monkeypatch)
    monkeypatch.setattr(shipped_fits, "SHIPPED_FITS_DIR", out)
    return fitted, out


@pytest.fixture
def fresh_machine(
    libraries_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[duckdb.DuckDBPyConnection, list[Library]]:
    """Another machine's first run: a new vocabulary build (new id), the libraries rebuilt (new time and
    build id in their manifests), an empty data folder."""
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path / "fresh-data"))
    con = duckdb.connect(str(build_fixture_vocab(tmp_path / "fresh-vocab.duckdb")), read_only=True)
    libraries = []
    for name in ("train", "other"):
        copy = tmp_path / "fresh-libraries" / name
        shutil.copytree(libraries_root / name, copy)
        path = copy / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        manifest["created_at"] = "2030-01-01T00:00:00+00:00"
        path.write_text(json.dumps(manifest), encoding="utf-8")
        libraries.append(load_library(copy))
    return con, libraries


def _without_model_folders(states: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    return {
        name: {key: value for key, value in state.items() if not key.endswith("model_directory")}
        for name, state in states.items()
    }


def test_a_fresh_build_of_the_same_inputs_installs_the_shipped_fit_without_fitting(
    shipped: tuple[FittedBuilders, Path], fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]]
) -> None:
    original, _ = shipped
    con, libraries = fresh_machine
    with fits_refused("this test fits nothing"):
        installed = fit_builders(con, None, HELD_OUT, libraries)
    assert any(note.startswith("installed the set builders fitted on fixture-train") for note in installed.notes)
    assert installed.training_libraries == original.training_libraries == ["fixture-train"]
    assert _without_model_folders(installed.states()) == _without_model_folders(original.states())
    assert original.model is not None and installed.model is not None
    assert original.context_model is not None and installed.context_model is not None
    assert installed.model.manifest.training_digest == original.model.manifest.training_digest
    # the model answers for this vocabulary build, and lives in a folder of its own
    assert installed.model.manifest.vocabulary_build_id != original.model.manifest.vocabulary_build_id
    assert installed.states()["learned"]["model_directory"] != original.states()["learned"]["model_directory"]
    # the next lookup finds it stored, as a local fit would be
    with fits_refused("this test fits nothing"):
        again = fit_builders(con, None, HELD_OUT, libraries)
    assert any(note.startswith("reused the builders fitted on fixture-train") for note in again.notes)


def test_other_fitting_code_leaves_the_fit_to_be_made_here(
    shipped: tuple[FittedBuilders, Path],
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    con, libraries = fresh_machine
    monkeypatch.setattr(shipped_fits, "code_digest", lambda: "code changed since the fits were shipped")
    with pytest.raises(FitRefused), fits_refused("this test fits nothing"):
        fit_builders(con, None, HELD_OUT, libraries)


def test_a_changed_cohort_file_is_other_data(
    shipped: tuple[FittedBuilders, Path], fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]]
) -> None:
    con, libraries = fresh_machine
    train = libraries[0]
    cohort = train.path / train.manifest.cohorts[0].file
    cohort.write_text(cohort.read_text(encoding="utf-8").replace("Type 2", "Type II"), encoding="utf-8")
    with pytest.raises(FitRefused), fits_refused("this test fits nothing"):
        fit_builders(con, None, HELD_OUT, [load_library(train.path), libraries[1]])


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "edit the manifest"])
def test_a_damaged_archive_is_never_installed(
    shipped: tuple[FittedBuilders, Path],
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    damage: str,
) -> None:
    _, out = shipped
    archive, manifest = out / shipped_fits.ARCHIVE_FILE, out / shipped_fits.MANIFEST_FILE
    data = archive.read_bytes()
    if damage == "flip a byte":
        archive.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif damage == "truncate":
        archive.write_bytes(data[: len(data) // 2])
    else:
        manifest.write_text(manifest.read_text(encoding="utf-8")[:-40], encoding="utf-8")
    with pytest.raises(ShippedFitsError):
        loaded = read_manifest(out)
        assert loaded is not None
        read_archive(loaded, out)
    con, libraries = fresh_machine
    with pytest.raises(FitRefused), fits_refused("this test fits nothing"):
        fit_builders(con, None, HELD_OUT, libraries)
    assert not list((Path(shipped_fits.models_dir())).glob("membership-*"))


def test_a_member_that_differs_from_the_manifest_is_refused(shipped: tuple[FittedBuilders, Path]) -> None:
    _, out = shipped
    manifest = read_manifest(out)
    assert manifest is not None
    name = next(iter(manifest.files_sha256))
    manifest.files_sha256[name] = "0" * 64
    with pytest.raises(ShippedFitsError, match="differs from the manifest"):
        read_archive(manifest, out)


def test_the_library_stamp_ignores_build_time_and_build_id_only(libraries_root: Path, tmp_path: Path) -> None:
    copy = tmp_path / "train"
    shutil.copytree(libraries_root / "train", copy)
    path = copy / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest.setdefault("report", {})["build"] = {"builder": "phenoforge.libraries", "vocabulary_build_id": "a"}
    path.write_text(json.dumps(manifest), encoding="utf-8")
    before = library_content_stamp(load_library(copy))
    manifest["created_at"] = "2031-05-05T00:00:00+00:00"
    manifest["report"]["build"]["vocabulary_build_id"] = "b"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    assert library_content_stamp(load_library(copy)) == before
    manifest["report"]["build"]["builder"] = "another builder"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    assert library_content_stamp(load_library(copy)) != before
    manifest["name"] = "renamed"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    assert library_content_stamp(load_library(copy)) != before


def test_no_shipped_folder_means_no_install(
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shipped_fits, "SHIPPED_FITS_DIR", tmp_path / "nothing shipped")
    assert read_manifest() is None
    con, libraries = fresh_machine
    monkeypatch.setattr("phenoforge.setbuild.api.is_training_library", lambda manifest: True)
    with pytest.raises(FitRefused), fits_refused("this test fits nothing"):
        fit_builders(con, None, HELD_OUT, libraries)


@pytest.mark.parametrize("damage", ["model folder removed", "bundle file edited"])
def test_an_installed_fit_damaged_later_is_installed_again_not_refitted(
    shipped: tuple[FittedBuilders, Path],
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    damage: str,
) -> None:
    con, libraries = fresh_machine
    with fits_refused("this test fits nothing"):
        first = fit_builders(con, None, HELD_OUT, libraries)
    models = Path(shipped_fits.models_dir())
    if damage == "model folder removed":
        shutil.rmtree(models / str(first.states()["learned"]["model_directory"]))
    else:
        (bundle,) = models.glob("fitted-*.json")
        bundle.write_text(
            bundle.read_text(encoding="utf-8").replace("fixture-train", "fixture-trian"), encoding="utf-8"
        )
    with fits_refused("this test fits nothing"):
        again = fit_builders(con, None, HELD_OUT, libraries)
    assert any(note.startswith("installed the set builders") for note in again.notes)
    assert again.model is not None and again.states() == first.states()


def test_phenoforge_shipped_fits_0_fits_here_instead(
    shipped: tuple[FittedBuilders, Path],
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    con, libraries = fresh_machine
    monkeypatch.setenv(shipped_fits.SHIPPED_FITS_ENV, "0")
    with pytest.raises(FitRefused), fits_refused("this test fits nothing"):
        fit_builders(con, None, HELD_OUT, libraries)
    monkeypatch.setenv(shipped_fits.SHIPPED_FITS_ENV, "yes")
    with fits_refused("this test fits nothing"):
        assert any(note.startswith("installed") for note in fit_builders(con, None, HELD_OUT, libraries).notes)


def test_an_installed_fit_says_it_is_the_shipped_one(
    shipped: tuple[FittedBuilders, Path], fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]]
) -> None:
    con, libraries = fresh_machine
    manifest = read_manifest(shipped[1])
    assert manifest is not None
    with fits_refused("this test fits nothing"):
        installed = fit_builders(con, None, HELD_OUT, libraries)
        again = fit_builders(con, None, HELD_OUT, libraries)  # read back from data/models
    assert installed.origin == again.origin == f"shipped fit {manifest.fits[0].content_signature}"


def _counting_fits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from phenoforge.setbuild import learned as learned_module

    calls: list[int] = []
    real = learned_module._fit

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(learned_module, "_fit", counted)
    return calls


def test_a_local_fit_takes_the_shipped_choices_and_fits_each_model_once(
    shipped: tuple[FittedBuilders, Path],
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original, _ = shipped
    con, libraries = fresh_machine
    monkeypatch.setenv(shipped_fits.SHIPPED_FITS_ENV, "0")  # nothing installed: fitted here
    calls = _counting_fits(monkeypatch)
    fitted = fit_builders(con, None, HELD_OUT, libraries)
    assert len(calls) == 2  # the two membership models, once each: no out-of-fold fits
    for made, shipped_model in ((fitted.model, original.model), (fitted.context_model, original.context_model)):
        assert made is not None and shipped_model is not None
        chosen = (made.manifest.rule, made.manifest.threshold, made.manifest.variant)
        assert chosen == (shipped_model.manifest.rule, shipped_model.manifest.threshold, shipped_model.manifest.variant)
        assert made.manifest.threshold_chosen_on.endswith(
            "when the shipped fits were made (reused: the same training groups)"
        )
    assert any("chosen out of fold on the same training groups" in note for note in fitted.notes)
    assert fitted.origin.startswith("local fit ")


def test_fit_choices_choose_makes_them_here_again(
    shipped: tuple[FittedBuilders, Path],
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    con, libraries = fresh_machine
    monkeypatch.setenv(shipped_fits.SHIPPED_FITS_ENV, "0")
    monkeypatch.setenv(shipped_fits.FIT_CHOICES_ENV, "choose")
    calls = _counting_fits(monkeypatch)
    fitted = fit_builders(con, None, HELD_OUT, libraries)
    assert len(calls) > 2
    assert fitted.model is not None and sorted(fitted.model.manifest.variants_compared) == ["free", "monotone"]


def test_a_misspelt_fit_choices_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shipped_fits.FIT_CHOICES_ENV, "chose")
    with pytest.raises(ValueError, match="'shipped' or 'choose'"):
        shipped_fits.shipped_choices(["fixture-train"])


def test_no_shipped_bundle_for_these_libraries_means_no_choices(shipped: tuple[FittedBuilders, Path]) -> None:
    assert shipped_fits.shipped_choices(["fixture-train"])["learned"]["model"]["variant"] in ("free", "monotone")
    assert shipped_fits.shipped_choices(["fixture-other"]) == {}
    assert shipped_fits.shipped_choices([]) == {}


def test_the_content_signature_is_the_same_on_another_cpu(
    fixture_con: duckdb.DuckDBPyConnection, libraries_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from phenoforge.engine.dense.model import _identity, _recipe

    libraries = [load_library(libraries_root / "train")]
    signatures, identities = [], []
    for flags in ("fpu sse2 avx2 fma", "fpu sse2 avx2 fma avx512f avx512_bf16 amx_bf16"):
        cpuinfo = tmp_path / f"cpuinfo-{len(signatures)}"
        cpuinfo.write_text(f"model name\t: Some CPU {len(signatures)}\nflags\t\t: {flags}\n", encoding="utf-8")
        monkeypatch.setenv("PHENOFORGE_CPUINFO", str(cpuinfo))

        def embed(texts: list[str]) -> None:  # pragma: no cover - never called
            raise AssertionError

        embed.recipe = _recipe("onnx", "fp32", ("onnxruntime",), [], 64, 128, None)  # type: ignore[attr-defined]
        embed.identity = _identity(embed.recipe)  # type: ignore[attr-defined]
        manifest = SimpleNamespace(
            format_version=3,
            model="m",
            text_recipe="r",
            precision="fp32",
            count=1,
            vectors_sha256="v",
            codes_sha256="c",
        )
        dense = SimpleNamespace(manifest=manifest, embed_fn=embed)
        signatures.append(shipped_fits.content_signature(fixture_con, libraries, libraries, dense, None))
        identities.append(embed.identity)  # type: ignore[attr-defined]
    assert signatures[0] == signatures[1]
    assert identities[0] != identities[1]  # what is cached here still tells the CPUs apart


# -- found by a hostile pass (each test failed before its fix)


def _other_choices(fitted) -> dict:  # noqa: ANN001
    """Choices unlike the ones this machine makes (another variant), as a shipping machine may have made them
    on data or code that differ from this one's: what happens whenever a local fit runs."""
    parts = {}
    for part, model in (("model", fitted.model), ("context_model", fitted.context_model)):
        assert model is not None
        other = "monotone" if model.manifest.variant == "free" else "free"
        parts[part] = {
            "rule": model.manifest.rule,
            "threshold": model.manifest.threshold,
            "variant": other,
            "chosen_on": "out-of-fold predictions, when the shipped fits were made (reused: the same training groups)",
        }
    return {"learned": parts}


def test_a_stored_choose_mode_fit_keeps_its_own_models_after_a_shipped_choices_fit(
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hostile pass: the learned builder's model folders are named without the choices, so a fit made
    with the shipped choices overwrites the models a choose-mode fit (another signature) stored; reusing the
    choose-mode bundle then serves the given-choices model as if it had been chosen here (and vice versa)."""
    con, libraries = fresh_machine
    _small_fixture_training(monkeypatch)
    monkeypatch.setenv(shipped_fits.SHIPPED_FITS_ENV, "0")
    monkeypatch.setenv(shipped_fits.FIT_CHOICES_ENV, "choose")
    chosen = fit_builders(con, None, HELD_OUT, libraries)
    assert chosen.model is not None
    made_here = (chosen.model.manifest.rule, chosen.model.manifest.threshold, chosen.model.manifest.variant)
    assert sorted(chosen.model.manifest.variants_compared) == ["free", "monotone"]

    other = _other_choices(chosen)
    monkeypatch.setenv(shipped_fits.FIT_CHOICES_ENV, "shipped")
    monkeypatch.setattr(
        shipped_fits, "shipped_choices", lambda _ids: {} if shipped_fits.fit_choices_mode() == "choose" else other
    )
    given = fit_builders(con, None, HELD_OUT, libraries)
    assert given.model is not None and given.model.manifest.variant == other["learned"]["model"]["variant"]
    assert given.origin != chosen.origin  # two signatures, two stored bundles

    monkeypatch.setenv(shipped_fits.FIT_CHOICES_ENV, "choose")
    again = fit_builders(con, None, HELD_OUT, libraries)  # reuses the choose-mode bundle (its signature)
    assert again.origin == chosen.origin
    assert again.model is not None
    assert (again.model.manifest.rule, again.model.manifest.threshold, again.model.manifest.variant) == made_here
    assert sorted(again.model.manifest.variants_compared) == ["free", "monotone"]


def test_choices_from_fits_of_other_code_say_so(
    shipped: tuple,
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hostile pass: once the fitting code changed after shipping (code digest mismatch: the shipped
    fits are not installed), a local fit still takes the shipped rules, thresholds and tree variants, and its
    notes and each model's ``threshold_chosen_on`` claim they were chosen "on the same training groups", with the
    shipped out-of-fold objectives, without a word that those fits were made by other code (other features):
    a developer benchmarking a feature change reads figures with thresholds tuned for the old features."""
    con, libraries = fresh_machine
    monkeypatch.setattr(shipped_fits, "code_digest", lambda *_a, **_k: "0" * 64)  # the fitting code changed
    fitted = fit_builders(con, None, HELD_OUT, libraries)
    assert fitted.origin.startswith("local fit ")  # not installed: other code
    given = fitted.model is not None and not fitted.model.manifest.variants_compared
    if given:  # the shipped choices were applied: the notes must say they come from other code
        told = " ".join(fitted.notes + [fitted.model.manifest.threshold_chosen_on])
        assert "code" in told and ("other" in told or "changed" in told or "differ" in told), fitted.notes


def test_the_reference_figures_name_the_shipped_fits_they_came_from() -> None:
    """Hostile pass: ``reference_benchmark.json`` is documented to name the fit of each fitted
    method as ``shipped fit <content signature>`` (``eval.reference.MethodFigures.fits``), the name a user's
    ``benchmark --json`` shows with these fits installed; it holds ``local fit <signature>`` of the shipping
    machine's data folder instead (its vocabulary build and dense build time), a name no other machine can
    match or look up: the provenance the reference was meant to carry is lost."""
    from phenoforge.eval.reference import read_figures
    from phenoforge.setbuild.shipped_fits import REFERENCE_FILE, SHIPPED_FITS_DIR, read_manifest

    manifest = read_manifest()
    assert manifest is not None
    shipped_names = {f"shipped fit {fit.content_signature}" for fit in manifest.fits}
    named = {
        figures.fits
        for methods in read_figures(SHIPPED_FITS_DIR / REFERENCE_FILE).libraries.values()
        for figures in methods.values()
        if figures.fits
    }
    assert named and named <= shipped_names, sorted(named - shipped_names)


def test_a_stored_shipped_choices_fit_keeps_its_own_models_after_a_choose_mode_fit(
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DEFECT (hostile-39 #1, the default mode's side): after one ``PHENOFORGE_FIT_CHOICES=choose`` run in the same
    data folder, the default run reuses its stored bundle, whose notes say the shipped choices were taken, but
    the model it loads is the one the choose run chose and wrote into the shared folder."""
    con, libraries = fresh_machine
    _small_fixture_training(monkeypatch)
    monkeypatch.setenv(shipped_fits.SHIPPED_FITS_ENV, "0")
    monkeypatch.setenv(shipped_fits.FIT_CHOICES_ENV, "choose")
    probe = fit_builders(con, None, HELD_OUT, libraries)  # what this machine chooses
    other = _other_choices(probe)
    from phenoforge.setbuild.model_store import models_dir

    (models_dir() / f"fitted-{probe.origin.split()[-1]}.json").unlink()  # as if the choose run came later
    monkeypatch.setattr(
        shipped_fits, "shipped_choices", lambda _ids: {} if shipped_fits.fit_choices_mode() == "choose" else other
    )
    monkeypatch.setenv(shipped_fits.FIT_CHOICES_ENV, "shipped")
    given = fit_builders(con, None, HELD_OUT, libraries)
    assert given.model is not None
    wanted = other["learned"]["model"]["variant"]
    assert given.model.manifest.variant == wanted
    monkeypatch.setenv(shipped_fits.FIT_CHOICES_ENV, "choose")
    fit_builders(con, None, HELD_OUT, libraries)  # a choose run: its stored bundle, and the shared model folder
    monkeypatch.setenv(shipped_fits.FIT_CHOICES_ENV, "shipped")
    again = fit_builders(con, None, HELD_OUT, libraries)
    assert again.origin == given.origin
    assert again.model is not None and again.model.manifest.variant == wanted


def test_a_fit_made_here_instead_of_installed_says_why(
    shipped: tuple[FittedBuilders, Path],
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    con, libraries = fresh_machine
    monkeypatch.setattr(shipped_fits, "code_digest", lambda: "f" * 64)
    fitted = fit_builders(con, None, HELD_OUT, libraries)
    said = [note for note in fitted.notes if note.startswith("fitted here, not installed as shipped: ")]
    assert len(said) == 1 and "the fitting code differs" in said[0] and "ship_fits.py" in said[0]


def test_a_damaged_archive_is_named_when_the_fit_is_made_here(
    shipped: tuple[FittedBuilders, Path],
    fresh_machine: tuple[duckdb.DuckDBPyConnection, list[Library]],
) -> None:
    _, out = shipped
    (out / "fits.tar.xz").write_bytes(b"damaged")
    con, libraries = fresh_machine
    fitted = fit_builders(con, None, HELD_OUT, libraries)
    said = " ".join(note for note in fitted.notes if note.startswith("fitted here, not installed as shipped: "))
    assert "fits.tar.xz" in said and "damaged or edited" in said

"""Shipped text vectors: used only when whole, of the installed model and the current text recipe, and only for
the pinned model in ONNX fp32; a build then embeds just the texts they lack."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from phenoforge.engine.dense import shipped
from phenoforge.engine.dense.model import DEFAULT_MODEL_NAME, MODEL_PACKAGE
from phenoforge.engine.dense.shipped import (
    MANIFEST_FILE,
    QUANTIZATION,
    SHIPPED_RUNTIME,
    ShippedFirst,
    ShippedManifest,
    ShippedUnavailable,
    dequantize,
    load_shipped,
    quantize,
    shipped_first,
    text_key,
    write_vectors,
)
from phenoforge.engine.dense.texts import TEXT_RECIPE_VERSION
from phenoforge.storage import sha256_file
from tests.engine.fake_embedder import FakeEmbedder

TEXTS = ["heart failure", "gout, unspecified", "type 2 diabetes mellitus without complications", "asthma"]


class PinnedLike(FakeEmbedder):
    """A fake that declares itself the pinned model in ONNX fp32 (what may take shipped vectors)."""

    precision = "fp32"
    runtime = "onnx"
    model_name = DEFAULT_MODEL_NAME


def write_shipped(directory: Path, texts: list[str], embed: FakeEmbedder, **changes: object) -> Path:
    keys = text_key(texts)
    order = np.argsort(keys)
    codes, scales = quantize(embed(texts)[order])
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "vectors.npz.xz"
    write_vectors(path, keys[order], codes, scales)
    fields: dict[str, object] = {
        "model": DEFAULT_MODEL_NAME,
        "model_package": MODEL_PACKAGE,
        "model_package_version": shipped.installed_model_version() or "absent",
        "runtime": SHIPPED_RUNTIME,
        "text_recipe": TEXT_RECIPE_VERSION,
        "quantization": QUANTIZATION,
        "count": len(texts),
        "dim": embed.dim,
        "vectors_file": "vectors.npz.xz",
        "vectors_sha256": sha256_file(path),
        "made_by": "test",
        "vocabulary_release": "fixture",
    } | changes
    (directory / MANIFEST_FILE).write_text(json.dumps(ShippedManifest.model_validate(fields).model_dump()))
    return path


@pytest.fixture
def installed_version(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(shipped, "installed_model_version", lambda: "9.9.9")
    return "9.9.9"


def test_stored_vectors_keep_cosine_above_0_99999() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(500, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    codes, scales = quantize(vectors)
    cosine = np.sum(dequantize(codes, scales) * vectors, axis=1)
    assert cosine.min() > 0.99999


def test_a_build_takes_shipped_texts_and_embeds_only_the_others(tmp_path: Path, installed_version: str) -> None:
    write_shipped(tmp_path, TEXTS[:3], FakeEmbedder())
    embed = PinnedLike()
    wrapped, note = shipped_first(embed, DEFAULT_MODEL_NAME, tmp_path)
    assert note is None and isinstance(wrapped, ShippedFirst)
    vectors = wrapped(["asthma", "heart failure", "gout, unspecified"])
    assert embed.texts_seen == ["asthma"]  # the one text not shipped
    assert (wrapped.found, wrapped.embedded) == (2, 1)
    reference = FakeEmbedder()(["asthma", "heart failure", "gout, unspecified"])
    assert np.all(np.sum(vectors * reference, axis=1) > 0.9999)


def test_an_embed_function_that_is_not_the_pinned_model_never_takes_them(
    tmp_path: Path, installed_version: str
) -> None:
    write_shipped(tmp_path, TEXTS, FakeEmbedder())
    fake = FakeEmbedder()  # declares no runtime or model: a test's, or another model's
    assert shipped_first(fake, DEFAULT_MODEL_NAME, tmp_path) == (fake, None)
    bf16 = PinnedLike()
    bf16.precision = "bf16"
    assert shipped_first(bf16, DEFAULT_MODEL_NAME, tmp_path)[0] is bf16
    assert shipped_first(PinnedLike(), "another-model", tmp_path)[0] is not None
    assert not isinstance(shipped_first(PinnedLike(), "another-model", tmp_path)[0], ShippedFirst)


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("truncated", "checksum"),
        ("edited", "checksum"),
        ("other_version", "1.2.3"),
        ("other_recipe", "text recipe"),
        ("missing_file", "missing"),
        ("no_manifest", "missing"),
        ("bad_manifest", "unreadable"),
        ("wrong_count", "shape"),
    ],
)
def test_damaged_or_foreign_shipped_vectors_are_refused_with_the_reason(
    tmp_path: Path, installed_version: str, damage: str, said: str
) -> None:
    changes: dict[str, object] = {}
    if damage == "other_version":
        changes["model_package_version"] = "1.2.3"
    if damage == "other_recipe":
        changes["text_recipe"] = "name-only-v0"
    path = write_shipped(tmp_path, TEXTS, FakeEmbedder(), **changes)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:-40])
    elif damage == "edited":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "missing_file":
        path.unlink()
    elif damage == "no_manifest":
        (tmp_path / MANIFEST_FILE).unlink()
    elif damage == "bad_manifest":
        (tmp_path / MANIFEST_FILE).write_text("{not json")
    elif damage == "wrong_count":
        manifest = json.loads((tmp_path / MANIFEST_FILE).read_text())
        manifest["count"] = 99
        (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ShippedUnavailable, match=said):
        load_shipped(tmp_path)
    embed = PinnedLike()
    wrapped, note = shipped_first(embed, DEFAULT_MODEL_NAME, tmp_path)
    assert wrapped is embed and note is not None and "every text is embedded here" in note


def test_the_shipped_files_in_the_repository_are_whole_and_current() -> None:
    """What the project ships must load: a stale recipe or a changed file fails here, not silently at a build."""
    vectors = load_shipped()
    assert vectors.manifest.count == len(vectors.keys) > 40_000
    assert vectors.manifest.text_recipe == TEXT_RECIPE_VERSION
    assert (shipped.SHIPPED_DIR / vectors.manifest.vectors_file).stat().st_size <= 25_000_000


def test_the_shipped_folder_is_looked_up_when_a_build_runs(
    tmp_path: Path, installed_version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build reads ``SHIPPED_DIR`` as it is then (bench_shipped points it elsewhere to build without them)."""
    write_shipped(tmp_path / "elsewhere", TEXTS, FakeEmbedder())
    monkeypatch.setattr(shipped, "SHIPPED_DIR", tmp_path / "elsewhere")
    assert isinstance(shipped_first(PinnedLike(), DEFAULT_MODEL_NAME)[0], ShippedFirst)
    monkeypatch.setattr(shipped, "SHIPPED_DIR", tmp_path / "none")
    assert not isinstance(shipped_first(PinnedLike(), DEFAULT_MODEL_NAME)[0], ShippedFirst)

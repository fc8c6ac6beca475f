"""Every file phenoforge writes under the data directory is described once; clean and Home read the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from phenoforge.artifacts import ARTIFACTS, MODELS, find_artifact, inventory

EXAMPLES = {
    "vocabulary": ("", "vocab.duckdb", False),
    "cohort libraries": ("", "libraries", True),
    "dense index": ("", "dense", True),
    "app state": ("", "app_state.sqlite", False),
    "cache": ("", "cache", True),
    "vocabulary lock": ("", ".vocab.duckdb.lock", False),
    "BM25 index": ("", "bm25", True),
    "models folder": ("", "models", True),
    "code list versions": ("", "versions", True),
    "node table": (MODELS, "node-table-abc123-v1.npz", False),
    "word counts": (MODELS, "word-counts-abc123-v1.json", False),
    "curated knowledge": (MODELS, "curated-knowledge-abc123-0123456789abcdef-v1.npz", False),
    "fitted builders": (MODELS, "fitted-0123456789abcdef.json", False),
    "tuned parameters": (MODELS, "builder-params-0123456789ab.json", False),
    "membership model": (MODELS, "membership-0123456789ab-0123456789ab-k0123456789", True),
    "membership model lock": (MODELS, ".membership-0123456789ab.lock", False),
    "set-builder fit lock": (MODELS, ".fit-0123456789ab.lock", False),
    "first-run fitting": (MODELS, ".first-run-fits.json", False),
    "ONNX export": (MODELS, "all-MiniLM-L6-v2-0.1.0-torch2.13.0-opset17.onnx", False),
    "ONNX export lock": (MODELS, "all-MiniLM-L6-v2-0.1.0-torch2.13.0-opset17.lock", False),
}


def test_every_kind_is_described_once_and_recognises_its_own_names() -> None:
    kinds = [artifact.kind for artifact in ARTIFACTS]
    assert len(kinds) == len(set(kinds)) and set(kinds) == set(EXAMPLES)
    for kind, (folder, name, is_dir) in EXAMPLES.items():
        found = find_artifact(folder, name, is_dir)
        assert found is not None and found[0].kind == kind, (kind, name)
        assert find_artifact(folder, name, not is_dir) is None  # a folder is not a file of the same name


@pytest.mark.parametrize("name", ["notes.txt", "fitted-xyz.json", "node-table-.npz", "membership-short"])
def test_a_name_no_description_matches_is_not_recognised(name: str) -> None:
    assert find_artifact(MODELS, name, False) is None and find_artifact(MODELS, name, True) is None


def test_each_versioned_kind_reads_the_version_its_module_writes() -> None:
    from phenoforge.setbuild.api import FIT_FORMAT_VERSION
    from phenoforge.setbuild.nodes import NODE_TABLE_FORMAT

    formats = {artifact.kind: artifact.format() for artifact in ARTIFACTS if artifact.format is not None}
    assert formats["node table"] == NODE_TABLE_FORMAT and formats["fitted builders"] == FIT_FORMAT_VERSION
    assert all(not artifact.removable for artifact in ARTIFACTS if artifact.folder == "")


def test_inventory_counts_by_kind_and_names_what_it_does_not_know(tmp_path: Path) -> None:
    data = tmp_path / "data"
    models = data / "models"
    (models / "membership-0123456789ab").mkdir(parents=True)
    (models / "membership-0123456789ab" / "model.onnx").write_bytes(b"x" * 10)
    (models / "fitted-0123456789abcdef.json").write_text("{}")
    (models / "fitted-fedcba9876543210.json").write_text("{}")
    (models / "my notes.txt").write_text("mine")
    (data / "vocab.duckdb").write_bytes(b"y" * 5)
    held, unknown = inventory(data)
    by_kind = {entry.artifact.kind: (entry.count, entry.size) for entry in held}
    assert by_kind["fitted builders"] == (2, 4)
    assert by_kind["membership model"] == (1, 10) and by_kind["vocabulary"] == (1, 5)
    assert by_kind["dense index"] == (0, 0)
    assert unknown == ["models/my notes.txt"]

"""Set-builder fixtures: the fixture vocabulary's hierarchy and a fixture library to train on."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.setbuild import learned
from phenoforge.setbuild.corpus import Example, library_examples
from phenoforge.setbuild.evaluate import LibraryScores, evaluate_library
from phenoforge.setbuild.learned import MembershipModel, train_membership_model
from tests.fixture_library import write_icd_library

# cohort id -> (name, codes, include descendants): names the fixture's BM25 can find
TRAIN_COHORTS = {
    "dm2": ("Type 2 diabetes mellitus", ["E11"], True),
    "dm1": ("Type 1 diabetes mellitus", ["E10"], True),
    "dm2-kidney": ("Type 2 diabetes mellitus with kidney complications", ["E11.2"], True),
    "hf": ("Heart failure", ["I50"], True),
    "hf-systolic": ("Systolic heart failure", ["I50.2"], True),
    "af": ("Atrial fibrillation", ["I48"], True),
    "asthma": ("Asthma", ["J45"], True),
    "obesity": ("Obesity", ["E66"], True),
    "pvd": ("Peripheral vascular disease", ["I73.9"], False),
    "femur": ("Fracture of neck of femur", ["S72.0"], True),
}
SMALL = {"min_cohorts": 3, "min_positives": 5}


def all_curated(ex: Example) -> Example:
    """The cohort with every candidate labelled curated: nothing left to learn to leave out."""
    return dataclasses.replace(ex, labels=np.ones(len(ex.table), dtype=np.int8))


DROP = object()
"""An ``edit_manifest`` value that removes the field (a manifest written before it existed)."""


def edit_manifest(directory: Path, **changes: object) -> None:
    """Rewrite fields of a stored model's manifest on disk, as a hand edit would (``DROP`` removes one)."""
    path = directory / learned.MANIFEST_FILE
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is DROP:
            manifest.pop(key, None)
        else:
            manifest[key] = value
    path.write_text(json.dumps(manifest), encoding="utf-8")


def resign_model(directory: Path, data: bytes, features: list[str] | None = None) -> None:
    """Replace a stored model's file (and its features) and make the manifest's checksum agree, as anyone
    who can write data/models can: the checksum only says the manifest and the file agree."""
    (directory / learned.MODEL_FILE).write_bytes(data)
    changes: dict[str, object] = {"sha256": hashlib.sha256(data).hexdigest()}
    if features is not None:
        changes["features"] = features
    edit_manifest(directory, **changes)


"""Training minimums the ten fixture cohorts can meet."""

OTHER_COHORTS = {
    "x-asthma": ("Unspecified asthma", ["J45.90"], True),
    "x-hf": ("Congestive heart failure", ["I50"], True),
}


def score_fixture_library(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    other_examples: list[Example],
    scored: str = "fixture-other",
    **kwargs: object,
) -> LibraryScores:
    """``learned`` scored out of sample on one of the two fixture libraries (by default the other one)."""
    return evaluate_library(
        con,
        hierarchy,
        train_examples + other_examples,
        scored,
        {"fixture-train", "fixture-other"},
        methods=("learned",),
        with_dense=False,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="session")
def hierarchy(fixture_con: duckdb.DuckDBPyConnection) -> Hierarchy:
    return get_hierarchy(fixture_con)


@pytest.fixture(scope="session")
def libraries_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("setbuild-libraries")
    write_icd_library(root / "train", TRAIN_COHORTS, library_id="fixture-train")
    write_icd_library(root / "other", OTHER_COHORTS, library_id="fixture-other")
    return root


@pytest.fixture(scope="session")
def train_examples(fixture_con: duckdb.DuckDBPyConnection, libraries_root: Path) -> list[Example]:
    return library_examples(fixture_con, load_library(libraries_root / "train"), dense=None)


@pytest.fixture(scope="session")
def other_examples(fixture_con: duckdb.DuckDBPyConnection, libraries_root: Path) -> list[Example]:
    return library_examples(fixture_con, load_library(libraries_root / "other"), dense=None)


@pytest.fixture(scope="module")
def model(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> MembershipModel:
    """A membership model fitted on the fixture library without dense features."""
    return train_membership_model(fixture_con, hierarchy, train_examples, with_dense=False, **SMALL)

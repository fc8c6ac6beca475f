"""Every file and folder phenoforge writes under the data directory, described once.

Each :class:`Artifact` names a kind of file, the pattern its names follow, where it lives, the format
version this phenoforge reads (when the kind has one) and what writes it. ``clean`` (``phenoforge.prune``)
recognises what it may remove by these descriptions only, and :func:`inventory` counts what is there by
them (Home shows it); a file no description matches is never removed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from phenoforge.storage import temporary_owner

ONNX_MODEL = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class Artifact:
    """One kind of file (or folder) phenoforge writes under the data directory."""

    kind: str
    folder: str
    """where it lives, relative to the data directory ('' for the data directory itself)"""
    pattern: re.Pattern[str]
    is_dir: bool
    writer: str
    """the module that writes it"""
    what: str
    format: Callable[[], int | str] | None = None
    """the format this version of phenoforge reads (None: the kind carries no version)"""
    removable: bool = True
    """whether ``clean`` may remove it when nothing current reads it (only under data/models)"""

    def matches(self, name: str, is_dir: bool) -> re.Match[str] | None:
        return self.pattern.match(name) if is_dir == self.is_dir else None


def _node_table_format() -> int:
    from phenoforge.setbuild.nodes import NODE_TABLE_FORMAT

    return NODE_TABLE_FORMAT


def _word_counts_format() -> int:
    from phenoforge.setbuild.robust import WORD_COUNTS_FORMAT

    return WORD_COUNTS_FORMAT


def _knowledge_format() -> int:
    from phenoforge.setbuild.transfer import KNOWLEDGE_FORMAT

    return KNOWLEDGE_FORMAT


def _model_format() -> int:
    from phenoforge.setbuild.learned import FORMAT_VERSION

    return FORMAT_VERSION


def _fit_format() -> int:
    from phenoforge.setbuild.api import FIT_FORMAT_VERSION

    return FIT_FORMAT_VERSION


def _params_format() -> str:
    from phenoforge.setbuild.api import PARAMS_RECIPE

    return PARAMS_RECIPE


def _vocabulary_schema() -> str:
    from phenoforge.engine.schema import SCHEMA_VERSION

    return SCHEMA_VERSION


def _versions_format() -> int:
    from phenoforge.lists.store import VERSION_FORMAT

    return VERSION_FORMAT


MODELS = "models"

ARTIFACTS: tuple[Artifact, ...] = (
    Artifact(
        "vocabulary",
        "",
        re.compile(r"^vocab\.duckdb$"),
        False,
        "phenoforge.engine.vocab_build",
        "the ICD-10-CM vocabulary and its hierarchy (DuckDB)",
        _vocabulary_schema,
        removable=False,
    ),
    Artifact(
        "cohort libraries",
        "",
        re.compile(r"^libraries$"),
        True,
        "phenoforge.libraries",
        "the bundled and imported cohort libraries, one folder each",
        removable=False,
    ),
    Artifact(
        "dense index",
        "",
        re.compile(r"^dense$"),
        True,
        "phenoforge.engine.dense",
        "the code texts' embeddings and their manifest",
        removable=False,
    ),
    Artifact(
        "app state",
        "",
        re.compile(r"^app_state\.sqlite(?:-wal|-shm|-journal)?$"),
        False,
        "phenoforge.app_state",
        "saved benchmark runs, assembly sessions and review decisions (SQLite)",
        removable=False,
    ),
    Artifact(
        "vocabulary lock",
        "",
        re.compile(r"^\.vocab\.duckdb\.lock$"),
        False,
        "phenoforge.engine.db",
        "the lock one builder of the vocabulary holds",
        removable=False,
    ),
    Artifact(
        "BM25 index",
        "",
        re.compile(r"^bm25$"),
        True,
        "phenoforge.engine.bm25",
        "the BM25 index of each vocabulary build, rebuilt from the vocabulary when missing",
        removable=False,
    ),
    Artifact(
        "cache",
        "",
        re.compile(r"^cache$"),
        True,
        "phenoforge.agent.cache",
        "answers of the Claude decomposer, one JSON file per request",
        removable=False,
    ),
    Artifact(
        "code list versions",
        "",
        re.compile(r"^versions$"),
        True,
        "phenoforge.lists.store",
        "signed-off code lists: a folder per list, a read-only JSON file per version, never rewritten",
        _versions_format,
        removable=False,
    ),
    Artifact(
        "models folder",
        "",
        re.compile(r"^models$"),
        True,
        "phenoforge.setbuild",
        "derived files of the set builders and the sentence model (below)",
        removable=False,
    ),
    Artifact(
        "node table",
        MODELS,
        re.compile(r"^node-table-(?P<build>.+)-v(?P<format>\d+)\.npz$"),
        False,
        "phenoforge.setbuild.nodes",
        "per vocabulary build, every node's row of the candidate features' table",
        _node_table_format,
    ),
    Artifact(
        "word counts",
        MODELS,
        re.compile(r"^word-counts-(?P<build>.+)-v(?P<format>\d+)\.json$"),
        False,
        "phenoforge.setbuild.robust",
        "per vocabulary build, the word counts typo correction reads",
        _word_counts_format,
    ),
    Artifact(
        "curated knowledge",
        MODELS,
        re.compile(r"^curated-knowledge-(?P<build>.+)-(?P<key>[0-9a-f]{16})-v(?P<format>\d+)\.npz$"),
        False,
        "phenoforge.setbuild.transfer",
        "the bundled libraries' curated cohorts with their name embeddings",
        _knowledge_format,
    ),
    Artifact(
        "fitted builders",
        MODELS,
        re.compile(r"^fitted-[0-9a-f]{16}\.json$"),
        False,
        "phenoforge.setbuild.api",
        "one fit of every registered set builder: each builder's fitted state, by name",
        _fit_format,
    ),
    Artifact(
        "tuned parameters",
        MODELS,
        re.compile(r"^builder-params-[0-9a-f]{12}\.json$"),
        False,
        "phenoforge.setbuild.api",
        "the examples-only builders' parameters, shared by fits on the same examples",
        _params_format,
    ),
    Artifact(
        "membership model",
        MODELS,
        re.compile(r"^membership-[0-9a-f]{12}(?:-[0-9a-f]{12})?(?:-k[0-9a-f]{10})?$"),
        True,
        "phenoforge.setbuild.learned",
        "a learned builder's trees (ONNX) and manifest",
        _model_format,
    ),
    Artifact(
        "membership model lock",
        MODELS,
        re.compile(r"^\.(?P<model>membership-.+)\.lock$"),
        False,
        "phenoforge.setbuild.learned",
        "the lock one writer of a membership model holds",
    ),
    Artifact(
        "set-builder fit lock",
        MODELS,
        re.compile(r"^\.fit-[0-9a-f]{12}\.lock$"),
        False,
        "phenoforge.setbuild.api",
        "the lock one fitter of the set builders holds per held-out group (others wait, then reuse its fit)",
        removable=False,
    ),
    Artifact(
        "first-run fitting",
        MODELS,
        re.compile(r"^\.first-run-fits\.(?:lock|json)$"),
        False,
        "phenoforge.dashboard.first_run",
        "the dashboard's first-run fitting: its lock, and its progress while it runs (for other processes)",
        removable=False,
    ),
    Artifact(
        "ONNX export",
        MODELS,
        re.compile(rf"^(?P<stem>{re.escape(ONNX_MODEL)}-.+?)(?P<int8>-int8)?\.onnx$"),
        False,
        "phenoforge.engine.dense.model",
        "the sentence model exported to ONNX (and its int8 version)",
    ),
    Artifact(
        "ONNX export lock",
        MODELS,
        re.compile(rf"^(?P<stem>{re.escape(ONNX_MODEL)}-.+)\.lock$"),
        False,
        "phenoforge.engine.dense.model",
        "the lock one exporter of the sentence model holds",
    ),
)
"""Every kind, the data directory's own entries first, then what lives under ``data/models``."""

ONNX_TEMPORARY = re.compile(rf"^\.{re.escape(ONNX_MODEL)}-.+\.onnx\.(?P<pid>\d+)\.tmp$")
"""``export_onnx`` and ``quantized_onnx_file`` write ``.<name>.<pid>.tmp`` (no random part)."""


def find_artifact(folder: str, name: str, is_dir: bool) -> tuple[Artifact, re.Match[str]] | None:
    """The description ``name`` (in ``folder`` of the data directory) follows, with its match; None if none."""
    for artifact in ARTIFACTS:
        if artifact.folder == folder:
            match = artifact.matches(name, is_dir)
            if match is not None:
                return artifact, match
    return None


@dataclass(frozen=True)
class Held:
    """How many of one kind are in the data directory now, and their bytes."""

    artifact: Artifact
    count: int
    size: int


def inventory(data_dir: Path) -> tuple[list[Held], list[str]]:
    """What the data directory holds, by kind (every described kind, present or not), and the names no
    description matches (``folder/name``)."""
    counts: dict[str, tuple[int, int]] = {}
    unknown: list[str] = []
    for folder in dict.fromkeys(artifact.folder for artifact in ARTIFACTS):
        where = data_dir / folder if folder else data_dir
        try:
            children = sorted(where.iterdir())
        except OSError:
            continue
        for child in children:
            if child.is_symlink():
                unknown.append(f"{folder}/{child.name}" if folder else child.name)
                continue
            found = find_artifact(folder, child.name, child.is_dir())
            if found is None:
                if temporary_owner(child.name) is None and not ONNX_TEMPORARY.match(child.name):
                    unknown.append(f"{folder}/{child.name}" if folder else child.name)
                continue
            count, size = counts.get(found[0].kind, (0, 0))
            counts[found[0].kind] = (count + 1, size + entry_size(child))
    held = [Held(a, *counts.get(a.kind, (0, 0))) for a in ARTIFACTS]
    return held, unknown


def entry_size(path: Path) -> int:
    """Bytes of a file, or of every file in a folder; links are not followed."""
    try:
        info = path.lstat()
    except OSError:
        return 0
    if not path.is_dir() or path.is_symlink():
        return info.st_size
    total = 0
    for root, _dirs, files in os.walk(path, followlinks=False):
        for file in files:
            with suppress(OSError):
                total += (Path(root) / file).lstat().st_size
    return total

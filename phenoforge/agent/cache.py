"""On-disk cache of decompositions, so repeated evals and page reloads do not re-bill the API.

Keyed by model, prompt version and the normalised description; only successful, validated
results are stored (errors are never cached). Entries hold no credentials.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from phenoforge import config


class CacheEntry(BaseModel):
    model: str
    prompt_version: str
    description: str
    terms: list[str]
    created_at: str


def normalise_description(description: str) -> str:
    """Whitespace and case do not change what Claude is asked, so they do not change the key."""
    return " ".join(description.split()).lower()


def cache_key(model: str, prompt_version: str, description: str) -> str:
    payload = json.dumps([model, prompt_version, normalise_description(description)])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class DecompositionCache:
    """One JSON file per key under ``directory`` (default ``config.cache_dir()/claude``)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else config.cache_dir() / "claude"

    def path(self, model: str, prompt_version: str, description: str) -> Path:
        return self.directory / f"{cache_key(model, prompt_version, description)}.json"

    def get(self, model: str, prompt_version: str, description: str) -> list[str] | None:
        path = self.path(model, prompt_version, description)
        try:
            entry = CacheEntry.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValidationError, ValueError):
            return None  # missing or corrupt: ask again rather than fail
        if entry.model != model or entry.prompt_version != prompt_version:
            return None
        return list(entry.terms)

    def put(self, model: str, prompt_version: str, description: str, terms: list[str]) -> Path:
        """Write atomically (temp file + rename) so a crash never leaves a half entry."""
        self.directory.mkdir(parents=True, exist_ok=True)
        entry = CacheEntry(
            model=model,
            prompt_version=prompt_version,
            description=description,
            terms=terms,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        path = self.path(model, prompt_version, description)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(entry.model_dump_json(indent=2))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

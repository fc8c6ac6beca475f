"""Every process-wide memo in one registry, each bounded the same way, all cleared by one call.

A memo (the hierarchy of a vocabulary build, a BM25 index, the fitted set builders, a stored model's trees)
saves seconds each time a process asks again. Each is a :class:`ProcessCache`: a dict with a name, an
optional bound (the oldest entry leaves first) and a place in the registry, so :func:`clear_process_caches`
forgets everything after data changes on disk and :func:`process_caches` says what is held.
"""

from __future__ import annotations

import threading
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")

_REGISTRY: list[ProcessCache[object, object]] = []
"""Every cache made, in order (two of one name are two caches: each is cleared)."""
_REGISTRY_LOCK = threading.Lock()


class ProcessCache(dict[K, V]):
    """A named process-wide dict; ``remember`` keeps at most ``max_entries`` (the oldest leaves first)."""

    def __init__(self, name: str, max_entries: int | None = None) -> None:
        super().__init__()
        if max_entries is not None and max_entries < 1:
            raise ValueError(f"cache {name!r}: max_entries must be at least 1, got {max_entries}")
        self.name = name
        self.max_entries = max_entries
        self.lock = threading.RLock()
        with _REGISTRY_LOCK:
            _REGISTRY.append(self)  # type: ignore[arg-type]  # the registry holds every key and value type

    def remember(self, key: K, value: V) -> V:
        """Keep ``value`` under ``key`` (making room first when the cache is full) and return it."""
        with self.lock:
            self.pop(key, None)
            if self.max_entries is not None:
                while len(self) >= self.max_entries:
                    del self[next(iter(self))]
            self[key] = value
        return value


def clear_process_caches() -> None:
    """Forget every process-wide memo (after the vocabulary, libraries or models change on disk)."""
    with _REGISTRY_LOCK:
        caches = list(_REGISTRY)
    for cache in caches:
        with cache.lock:
            cache.clear()


def process_caches() -> dict[str, int]:
    """Every registered cache's name and how many entries it holds now (caches of one name added up)."""
    sizes: dict[str, int] = {}
    with _REGISTRY_LOCK:
        for cache in _REGISTRY:
            sizes[cache.name] = sizes.get(cache.name, 0) + len(cache)
    return dict(sorted(sizes.items()))

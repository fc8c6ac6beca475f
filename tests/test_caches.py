"""The process-wide memos: one registry, one bound rule (the oldest leaves first), one call clears them all."""

from __future__ import annotations

import pytest

from phenoforge.caches import ProcessCache, clear_process_caches, process_caches


def test_remember_keeps_at_most_its_bound_and_the_oldest_leaves_first() -> None:
    cache: ProcessCache[str, int] = ProcessCache("test: bounded", max_entries=2)
    assert cache.remember("a", 1) == 1
    cache.remember("b", 2)
    cache.remember("a", 3)  # asked again: now the newest
    cache.remember("c", 4)
    assert cache == {"a": 3, "c": 4}


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ProcessCache("test: nothing", max_entries=0)


def test_one_call_clears_every_registered_cache_including_the_packages_own() -> None:
    import phenoforge.engine.expansion  # noqa: F401  # registers the hierarchies' cache
    import phenoforge.methods.set_building  # noqa: F401  # registers the fitted builders' cache

    mine: ProcessCache[str, int] = ProcessCache("test: cleared")
    mine["x"] = 1
    names = process_caches()
    assert {"hierarchies", "fitted set builders", "test: cleared"} <= set(names)
    assert names["test: cleared"] == 1
    clear_process_caches()
    assert process_caches()["test: cleared"] == 0 and not mine

"""Checks of the process caches: names, threads, and a clear in the middle of work."""

from __future__ import annotations

import threading

import pytest

from phenoforge.caches import ProcessCache, clear_process_caches, process_caches
from phenoforge.methods import set_builder_fits


def test_a_second_cache_of_the_same_name_does_not_escape_clearing() -> None:
    first: ProcessCache[str, int] = ProcessCache("hostile duplicate")
    second: ProcessCache[str, int] = ProcessCache("hostile duplicate")
    first["k"] = 1
    second["k"] = 2
    clear_process_caches()
    assert not first and not second


def test_remember_from_many_threads_keeps_the_bound() -> None:
    cache: ProcessCache[int, int] = ProcessCache("hostile threads", max_entries=7)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        barrier.wait()
        try:
            for i in range(2000):
                cache.remember(offset * 10_000 + i, i)
                if i % 97 == 0:
                    clear_process_caches()
        except BaseException as error:  # noqa: BLE001 - any error in a thread is the finding
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(cache) <= 7
    assert process_caches()["hostile threads"] == len(cache)


def test_fitted_for_survives_a_cache_clear_in_the_middle(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from phenoforge.methods import set_building

    class ClearedAfterStore(ProcessCache):  # type: ignore[type-arg]
        def __setitem__(self, key: object, value: object) -> None:
            super().__setitem__(key, value)
            clear_process_caches()  # as another thread's clear would, right after the store

    fitted = SimpleNamespace(knowledge=None, notes=[], training_groups=[])
    monkeypatch.setattr(set_builder_fits, "_FITTED", ClearedAfterStore("hostile fitted"))
    monkeypatch.setattr(set_builder_fits, "fit_builders", lambda *args, **kwargs: fitted)
    monkeypatch.setattr(set_builder_fits, "list_libraries", lambda errors: [])
    monkeypatch.setattr(set_builder_fits, "without_copied_lists", lambda context, fit, holdout=None: fit)
    run = SimpleNamespace(fitted=None)
    monkeypatch.setattr(set_builder_fits, "_run", lambda context: run)
    context = SimpleNamespace(
        hierarchy=SimpleNamespace(build_id="b"),
        library_id="elixhauser-x",
        library_group="elixhauser",
        library_path="",
        has_dense=False,
        progress=None,
        con=None,
        dense=None,
    )
    assert set_building.fitted_for(context) is fitted  # type: ignore[arg-type]

"""The allocator setting the CLI's benchmark applies (once, on glibc only, never over the user's choice)
and the collector pause of a batch (restored when the last overlapping batch ends, also after an error)."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator

import pytest

from phenoforge import memory


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_APPLIED", [])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_threshold_is_set_once_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    calls: list[tuple[int, int]] = []

    class Libc:
        def mallopt(self, parameter: int, value: int) -> int:
            calls.append((parameter, value))
            return 1

    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: Libc())
    assert memory.fix_mmap_threshold() and memory.fix_mmap_threshold()
    assert calls == [(memory.M_MMAP_THRESHOLD, 128 * 1024)]  # glibc's own parameter number, asked once


def test_the_users_own_threshold_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: pytest.fail("mallopt must not be called"))
    assert memory.fix_mmap_threshold() is False


def test_no_glibc_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)

    def missing(name: str) -> object:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(memory.ctypes, "CDLL", missing)
    assert memory.fix_mmap_threshold() is False


# -- the collector paused over a batch ---------------------------------------------------------


@pytest.fixture
def collecting() -> Iterator[None]:
    """Collection on before the test and after it, whatever the test did."""
    was = gc.isenabled()
    gc.enable()
    yield
    assert not memory._GC_HOLDERS, "a pause was left open"
    if not was:
        gc.disable()


def test_a_batch_runs_without_collection_and_restores_it(collecting: None) -> None:
    with memory.collections_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_in_the_batch_still_restores_collection(collecting: None) -> None:
    with pytest.raises(RuntimeError), memory.collections_paused():
        raise RuntimeError("the batch failed")
    assert gc.isenabled()


def test_a_user_who_turned_collection_off_keeps_it_off(collecting: None) -> None:
    gc.disable()
    with memory.collections_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
    gc.enable()


def test_overlapping_batches_restore_collection_when_the_last_ends(collecting: None) -> None:
    """Two dashboard sessions: the first to finish must not turn collection on under the other."""
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with memory.collections_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with memory.collections_paused():
            second_in.set()
            first_out.wait(5)
            seen.append(gc.isenabled())  # the first batch has ended: still paused for this one

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == [False]
    assert gc.isenabled()

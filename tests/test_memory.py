"""The allocator setting the CLI's benchmark applies: once, on glibc only, never over the user's choice."""

from __future__ import annotations

import sys

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

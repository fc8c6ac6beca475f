"""The embedder identity's CPU part: what the stored vectors of another CPU are told apart by."""

from __future__ import annotations

from pathlib import Path

import pytest

from phenoforge.engine.dense.model import _cpu_model

X86 = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu sse2 avx2 {extra}\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd {extra}\nCPU implementer\t: 0x41\nCPU part\t: {part}\n"


def _described(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(text, encoding="utf-8")
    return _cpu_model(path)


def test_another_x86_instruction_set_is_another_cpu(tmp_path: Path) -> None:
    plain = _described(tmp_path, X86.format(extra=""))
    assert plain.startswith("Intel(R) Xeon(R) Platinum 8480+ ")
    assert plain != _described(tmp_path, X86.format(extra="avx512_bf16 amx_bf16"))


def test_arm_cpus_are_told_apart_by_their_features_and_part(tmp_path: Path) -> None:
    # ARM's /proc/cpuinfo has "Features" and "CPU part", no "flags" or "model name": every ARM CPU had one
    # identity, so a data dir copied from a Neoverse V1 (SVE) to an N1 reused vectors computed on the other
    n1 = _described(tmp_path, ARM.format(extra="", part="0xd0c"))
    v1 = _described(tmp_path, ARM.format(extra="sve bf16", part="0xd40"))
    assert n1 != v1
    assert n1 != _described(tmp_path, ARM.format(extra="sve bf16", part="0xd0c"))  # the features alone count
    assert n1 != _described(tmp_path, ARM.format(extra="", part="0xd40"))  # and the part alone


def test_another_cpu_changes_the_identity_but_not_the_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the recipe names what is shipped (query vectors, fits); the identity what is computed and cached here
    from phenoforge.engine.dense.model import _identity, _recipe

    recipe = _recipe("onnx", "fp32", ("onnxruntime",), [], 64, 128, None)
    identities = []
    for extra in ("", "avx512f avx512_bf16 amx_bf16"):
        path = tmp_path / f"cpuinfo{len(identities)}"
        path.write_text(X86.format(extra=extra), encoding="utf-8")
        monkeypatch.setenv("PHENOFORGE_CPUINFO", str(path))
        assert _recipe("onnx", "fp32", ("onnxruntime",), [], 64, 128, None) == recipe
        identities.append(_identity(recipe))
    assert identities[0] != identities[1]


def test_the_simulated_cpu_also_decides_native_bf16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from phenoforge.engine.dense.model import cpu_has_native_bf16

    path = tmp_path / "cpuinfo"
    path.write_text(X86.format(extra=""), encoding="utf-8")
    monkeypatch.setenv("PHENOFORGE_CPUINFO", str(path))
    assert not cpu_has_native_bf16()
    path.write_text(X86.format(extra="avx512_bf16"), encoding="utf-8")
    assert cpu_has_native_bf16()

"""Run phenoforge as another CPU would, on this one: for the tests and bench scripts that show that nothing
shipped depends on the CPU that made it.

Three things change what a CPU computes: its name and instruction-set flags (read by the embedding's identity,
``PHENOFORGE_CPUINFO``), the SIMD kernels numpy and OpenBLAS dispatch to (``NPY_DISABLE_CPU_FEATURES``,
``OPENBLAS_CORETYPE``), and ONNX Runtime's kernels, whose rounding of a text's vector in its last bits
``PHENOFORGE_ORT_OPTIMIZATION=disabled`` changes as another CPU's kernels would (ONNX Runtime offers no switch
for its instruction set).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

AVX2_LAPTOP = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: 11th Gen Intel(R) Core(TM) i5-1135G7 @ 2.40GHz\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ss ht syscall nx rdtscp lm constant_tsc pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes "
    "xsave avx f16c rdrand hypervisor lahf_lm abm bmi1 avx2 bmi2 erms\n"
)
"""``/proc/cpuinfo`` of a laptop with AVX2 and no AVX-512."""

WIDER_NUMPY_FEATURES = ("X86_V4", "AVX512_SKX", "AVX512_ICL", "AVX512_SPR")
"""numpy's dispatch targets beyond AVX2 (numpy 2.x names)."""


def as_avx2_laptop(env: Mapping[str, str], cpuinfo: Path) -> dict[str, str]:
    """``env`` changed to run as an AVX2 laptop would; writes its ``/proc/cpuinfo`` to ``cpuinfo``."""
    from numpy._core._multiarray_umath import __cpu_features__  # type: ignore[import-not-found]

    cpuinfo.write_text(AVX2_LAPTOP, encoding="utf-8")
    out = {
        **env,
        "PHENOFORGE_CPUINFO": str(cpuinfo),
        "PHENOFORGE_ORT_OPTIMIZATION": "disabled",
        "OPENBLAS_CORETYPE": "Haswell",
    }
    wider = [name for name in WIDER_NUMPY_FEATURES if __cpu_features__.get(name)]
    if wider:  # only what this CPU has: on an AVX2 machine there is nothing to disable
        out["NPY_DISABLE_CPU_FEATURES"] = " ".join(wider)
    return out

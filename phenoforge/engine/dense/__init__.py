"""Dense retrieval: all-MiniLM-L6-v2 embeddings of every retrievable ICD-10-CM code.

Three parts, one module each: ``model`` (the sentence model, offline, and its precision modes),
``texts`` (what gets embedded and how a build's vectors are computed), ``store`` (files,
manifest, checksums, missing/stale/corrupt detection) and ``retriever`` (search and the entry
points). The names below are the public surface; import them from ``phenoforge.engine.dense``.
"""

from phenoforge.engine.dense.model import (
    DEFAULT_MODEL_NAME,
    DEFAULT_PRECISION,
    MAX_SEQ_LENGTH,
    MODEL_PACKAGE,
    DenseIndexNotReady,
    EmbedFn,
    Precision,
    cpu_has_native_bf16,
    default_embed_fn,
    describe_auto_choice,
    describe_embed_fn,
    export_onnx,
    model_path,
)
from phenoforge.engine.dense.retriever import (
    MAX_QUERY_CHARS,
    DenseRetriever,
    clean_query,
    ensure_dense_index,
    load_dense,
    load_dense_if_ready,
)
from phenoforge.engine.dense.store import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    REBUILD_COMMAND,
    DenseIndexStatus,
    DenseManifest,
    dense_index_status,
)
from phenoforge.engine.dense.texts import (
    DEFAULT_BUILD_MODE,
    TEXT_RECIPE_VERSION,
    BuildMode,
    ConceptTexts,
    compute_vectors,
    concept_texts,
    embed_unique,
)

__all__ = [
    "DEFAULT_BUILD_MODE",
    "DEFAULT_MODEL_NAME",
    "DEFAULT_PRECISION",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "MAX_QUERY_CHARS",
    "MAX_SEQ_LENGTH",
    "MODEL_PACKAGE",
    "REBUILD_COMMAND",
    "TEXT_RECIPE_VERSION",
    "BuildMode",
    "ConceptTexts",
    "DenseIndexNotReady",
    "DenseIndexStatus",
    "DenseManifest",
    "DenseRetriever",
    "EmbedFn",
    "Precision",
    "clean_query",
    "compute_vectors",
    "concept_texts",
    "cpu_has_native_bf16",
    "default_embed_fn",
    "describe_auto_choice",
    "describe_embed_fn",
    "export_onnx",
    "dense_index_status",
    "embed_unique",
    "ensure_dense_index",
    "load_dense",
    "load_dense_if_ready",
    "model_path",
]

"""A deterministic stand-in for the sentence model: hashed bag of words, normalised.

Texts that share words get near vectors, so neighbour tests mean something, and every call is
counted, so tests can prove an index was reused rather than re-embedded.
"""

from __future__ import annotations

import hashlib
import re
import time

import numpy as np

_WORD = re.compile(r"\w+")


class FakeEmbedder:
    """``embed(texts) -> float32 (n, dim)``; ``calls`` and ``texts_seen`` record the work done."""

    precision = "fake"

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.calls = 0
        self.texts_seen: list[str] = []

    def _bucket(self, word: str) -> tuple[int, float]:
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 40) & 1 else -1.0

    def embed_one(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dim, np.float32)
        for word in _WORD.findall(text.casefold()):
            bucket, sign = self._bucket(word)
            vector[bucket] += sign
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts_seen.extend(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.embed_one(text) for text in texts]).astype(np.float32)


class SlowFakeEmbedder(FakeEmbedder):
    """``FakeEmbedder`` at about 7 texts a second: a first-run dense build of the fixture vocabulary lasts some
    seconds, long enough for a browser test to watch its progress (``PHENOFORGE_EMBEDDER`` names it)."""

    def __call__(self, texts: list[str]) -> np.ndarray:
        time.sleep(0.15 * len(texts))
        return super().__call__(texts)

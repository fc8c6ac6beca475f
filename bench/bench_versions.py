"""Signed-off versions: how long a save, a load and a listing take for a large list.

Saves ``--versions`` versions of one list of ``--codes`` codes into a scratch folder (never ``data/``) and
prints medians: a save (temporary write, fsync, read-only, link, the folder's fsync), a load (read, digest
check, validation), and one listing of every version (each read and checked whole).

    python bench/bench_versions.py                      # 2,000 codes, 20 versions
    python bench/bench_versions.py --codes 10000 --versions 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from phenoforge.lists import store
from phenoforge.lists.store import VersionCode, VersionDraft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codes", type=int, default=2000)
    parser.add_argument("--versions", type=int, default=20)
    args = parser.parse_args()
    codes = [
        VersionCode(code=f"X{i:05d}", name="n" * 60, provenance="lib/cohort", decision="curated", reason="r" * 120)
        for i in range(args.codes)
    ]
    draft = VersionDraft(
        list_id="bench", reviewer="bench", description="d", method="m", vocabulary_release="r",
        vocabulary_build_id="b", codes=codes,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        saves, loads = [], []
        for number in range(args.versions):
            start = time.perf_counter()
            store.save_version(draft.model_copy(update={"based_on": number or None}), root)
            saves.append(time.perf_counter() - start)
            start = time.perf_counter()
            store.load_version("bench", root=root)
            loads.append(time.perf_counter() - start)
        start = time.perf_counter()
        store.list_versions("bench", root)
        listing = time.perf_counter() - start
        size = (root / "bench" / "v0001.json").stat().st_size
    save, load = statistics.median(saves) * 1000, statistics.median(loads) * 1000
    print(
        f"{args.codes:,}-code version ({size / 1e6:.2f} MB): save median {save:.1f} ms, load median {load:.1f} ms, "
        f"listing {args.versions} versions {listing * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()

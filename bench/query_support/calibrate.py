"""Calibrate the Explore page's 'nothing supports this query' threshold on the real dense model.

Two query sets sit beside this file: clinical.txt (queries the vocabulary should support) and
nonsense.txt (queries it should not). Each is split in halves by line parity: the threshold is chosen
on the even lines (the one with the fewest errors, ties to the midpoint between neighbours), and the
error rates are reported on the odd lines, which played no part in choosing it.

    PHENOFORGE_DATA_DIR=/path/to/data python bench/query_support/calibrate.py
"""

from __future__ import annotations

import json
from pathlib import Path

from phenoforge.dashboard.explore import search_side_by_side, top_score, unsupported
from phenoforge.dashboard.resources import open_vocabulary
from phenoforge.engine.dense import load_dense_if_ready

HERE = Path(__file__).parent


def signals(queries: list[str]) -> list[tuple[bool, float]]:
    """Per query: whether BM25 found nothing, and the top dense score."""
    con = open_vocabulary()
    dense = load_dense_if_ready(con)
    assert dense is not None, "needs a built dense index and the real model"
    out = []
    for query in queries:
        results = search_side_by_side(con, query, ["bm25", "dense"], k=10, dense=dense)
        score = top_score(results["dense"])
        assert score is not None
        out.append((not results["bm25"].hits, score))
    return out


def errors(clinical: list[tuple[bool, float]], nonsense: list[tuple[bool, float]], threshold: float) -> tuple[int, int]:
    """(clinical queries called unsupported, nonsense queries called supported)."""
    false_alarms = sum(unsupported(empty, score, threshold) for empty, score in clinical)
    misses = sum(not unsupported(empty, score, threshold) for empty, score in nonsense)
    return false_alarms, misses


def main() -> None:
    sets = {name: (HERE / f"{name}.txt").read_text().split("\n") for name in ("clinical", "nonsense")}
    sets = {name: [q for q in queries if q.strip()] for name, queries in sets.items()}
    measured = {name: signals(queries) for name, queries in sets.items()}
    calibrate = {name: values[0::2] for name, values in measured.items()}
    held_out = {name: values[1::2] for name, values in measured.items()}
    scores = sorted({score for values in calibrate.values() for _e, score in values})
    candidates = [(a + b) / 2 for a, b in zip(scores, scores[1:], strict=False)]
    threshold = min(candidates, key=lambda t: (sum(errors(calibrate["clinical"], calibrate["nonsense"], t)), t))
    cal = errors(calibrate["clinical"], calibrate["nonsense"], threshold)
    held = errors(held_out["clinical"], held_out["nonsense"], threshold)
    report = {
        "threshold": round(threshold, 4),
        "calibration": {
            "clinical_called_unsupported": f"{cal[0]}/{len(calibrate['clinical'])}",
            "nonsense_called_supported": f"{cal[1]}/{len(calibrate['nonsense'])}",
        },
        "held_out": {
            "clinical_called_unsupported": f"{held[0]}/{len(held_out['clinical'])}",
            "nonsense_called_supported": f"{held[1]}/{len(held_out['nonsense'])}",
        },
        "per_query": {
            name: [
                {"query": q, "bm25_empty": e, "dense_top": round(s, 4), "held_out": i % 2 == 1}
                for i, (q, (e, s)) in enumerate(zip(sets[name], measured[name], strict=True))
            ]
            for name in sets
        },
    }
    (HERE / "calibration.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "per_query"}, indent=1))


if __name__ == "__main__":
    main()

"""A one-shot CLI call imports only what it runs: heavy libraries load where they are used.

`python -m phenoforge benchmark --cohorts X` once spent most of its start-up importing the agent
CLI, bm25s and scipy, scikit-learn and httpx before doing any work (issue 11's cold start).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ["bm25s", "scipy", "sklearn", "torch", "sentence_transformers", "httpx", "onnxruntime", "pandas"]


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def test_the_parser_and_the_benchmark_path_import_no_heavy_library() -> None:
    loaded = _loaded_after(
        "import phenoforge.cli as cli\n"
        "cli.build_parser()\n"
        "from phenoforge.eval.harness import registered_methods, resolve_methods, run_benchmark\n"
        "resolve_methods(registered_methods())\n"
        "import phenoforge.setbuild.learned, phenoforge.athena.ohdsi, phenoforge.cli.agent, phenoforge.engine.bm25"
    )
    assert loaded == set()


def test_building_a_bm25_index_is_what_imports_bm25s(fixture_db_path: Path) -> None:
    loaded = _loaded_after(
        "import duckdb\n"
        "from phenoforge.engine.bm25 import BM25Index, document_texts\n"
        f"BM25Index(document_texts(duckdb.connect({str(fixture_db_path)!r}, read_only=True)))"
    )
    assert "bm25s" in loaded and "sklearn" not in loaded

"""OHDSI users' path: an Athena vocabulary download and Phenotype Library cohorts (issue 4); the
mapping of their standard concepts to ICD-10-CM is ``phenoforge.engine.standard_mapping``.

``register_cli`` is imported by ``phenoforge.cli`` for the ``library`` command group; everything
else is imported lazily so ``import phenoforge.athena`` stays cheap.
"""

from __future__ import annotations

import argparse


def register_cli(library_subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``library fetch-ohdsi`` (``build --athena DIR`` is wired in ``phenoforge.cli``)."""
    from phenoforge.athena.ohdsi import register_cli as register_fetch

    register_fetch(library_subparsers)

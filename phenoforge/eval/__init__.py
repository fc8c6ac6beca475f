"""Ontology-aware metrics and the benchmark harness.

Scores retrieval and decomposition against the bundled curated cohorts as ground truth. See
docs/results.md for what has actually been measured.
"""

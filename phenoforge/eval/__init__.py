"""Ontology-aware metrics and the benchmark harness.

Scores retrieval and decomposition against the bundled curated cohorts as ground truth. See the
README's "Validation and limitations" section for what has actually been measured.
"""

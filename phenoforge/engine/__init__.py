"""Vocabulary, hierarchy, retrieval and curated cohort libraries."""

"""The cohort-assembly agent: decomposition, curated-first resolution, a human gate, export."""

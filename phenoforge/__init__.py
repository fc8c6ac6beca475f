"""phenoforge: defensible ICD-10-CM code lists for cohort definitions, and an honest benchmark."""

__version__ = "0.1.0"

"""Set builders: from two retrievers' rankings to the billable code list a researcher would run.

Pure, registry-independent code: each builder takes a query, the BM25 and dense rankings (with
scores) and the ICD-10-CM hierarchy, and returns billable codes each carrying its provenance.
"""

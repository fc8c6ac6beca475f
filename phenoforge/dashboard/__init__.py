"""Services the Streamlit pages call: every number a page shows is computed here, never in a page.

Nothing in this package imports streamlit, so it is tested like the rest of the package.
"""

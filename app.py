"""phenoforge dashboard: `streamlit run app.py`. Routes to Home and every page under pages/.

Pages are found by listing pages/ (sorted by their number prefix), so a page added there, such
as the assembly page, appears without touching this file.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent

pages = [st.Page(str(ROOT / "home_page.py"), title="Home", icon=":material/home:", default=True)]
pages += [st.Page(str(path)) for path in sorted((ROOT / "pages").glob("[0-9]*_*.py"))]
st.navigation(pages).run()

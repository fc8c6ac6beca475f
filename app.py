"""phenoforge dashboard: the entry point names every page (the first is Home) and runs the chosen one.

``streamlit run app.py`` starts here; the sidebar lists the pages by these titles, so the start page
reads "Home" rather than the script's file name.
"""

from __future__ import annotations

import streamlit as st

PAGES = [
    st.Page("home.py", title="Home", icon=":material/home:", url_path="home", default=True),
    st.Page("pages/1_Benchmark.py", title="Benchmark", icon=":material/bar_chart:", url_path="Benchmark"),
    st.Page(
        "pages/2_Cohort_drilldown.py", title="Cohort drilldown", icon=":material/zoom_in:", url_path="Cohort_drilldown"
    ),
    st.Page("pages/3_Hybrid_weight.py", title="Hybrid weight", icon=":material/tune:", url_path="Hybrid_weight"),
    st.Page(
        "pages/4_Decomposition.py", title="Decomposition", icon=":material/account_tree:", url_path="Decomposition"
    ),
    st.Page("pages/5_Explore.py", title="Explore", icon=":material/search:", url_path="Explore"),
    st.Page("pages/6_Assemble.py", title="Assemble", icon=":material/checklist:", url_path="Assemble"),
    st.Page("pages/7_Compare.py", title="Compare", icon=":material/compare_arrows:", url_path="Compare"),
    st.Page("pages/8_Versions.py", title="Versions", icon=":material/history:", url_path="Versions"),
]

st.set_page_config(page_title="phenoforge", page_icon="🧬", layout="wide")  # every page: wide, 1,280 px fits
st.navigation(PAGES).run()

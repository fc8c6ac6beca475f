"""Code lists people sign off and compare: versions (``store``), list references (``sources``), exports."""

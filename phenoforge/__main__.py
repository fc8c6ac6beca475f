"""``python -m phenoforge``."""

import sys

from phenoforge.cli import main

sys.exit(main())

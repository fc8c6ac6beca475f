"""Fit every set-builder bundle a fresh ``build`` makes and pack them into ``phenoforge/setbuild/shipped_fits/``.

Run it on a data folder that a fresh ``python -m phenoforge build --no-fit`` made from this checkout (the dense
index built from the shipped vectors), after the last change to any fitting code::

    PHENOFORGE_DATA_DIR=/tmp/ship python -m phenoforge build --no-fit
    python scripts/ship_fits.py --data /tmp/ship

It fits what is missing (minutes), then writes ``fits.tar.xz`` and ``manifest.json``: each bundle under the
content signature a first run on another machine computes for the same inputs
(:mod:`phenoforge.setbuild.shipped_fits`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a data folder a fresh build made")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the package's folder)")
    args = parser.parse_args()
    os.environ["PHENOFORGE_DATA_DIR"] = str(args.data.resolve())

    from phenoforge.engine.curated import list_libraries
    from phenoforge.engine.db import connect
    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.methods.set_builder_fits import installed_fit_keys
    from phenoforge.setbuild import ship, shipped_fits

    con = connect()
    dense = load_dense_if_ready(con)
    if dense is None:
        print("no dense index in this data folder: run `python -m phenoforge build --no-fit` first", file=sys.stderr)
        return 2
    libraries = list_libraries(errors=[])
    out = args.out or shipped_fits.SHIPPED_FITS_DIR
    ship.pack_shipped_fits(con, dense, libraries, installed_fit_keys(libraries), out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Fit every set-builder bundle a fresh ``build`` makes and ship them, with what makes them the same on every CPU.

Run it on a data folder that a fresh ``python -m phenoforge build --no-fit`` made from this checkout (the dense
index built from the shipped vectors), after the last change to any fitting code::

    PHENOFORGE_DATA_DIR=/tmp/ship python -m phenoforge build --no-fit
    python scripts/ship_fits.py --data /tmp/ship

It writes three things:

1. every fit a fresh build makes, the membership models' rules and tree variants chosen out of fold here
   (``PHENOFORGE_FIT_CHOICES=choose``; a local fit elsewhere reuses them), into
   ``phenoforge/setbuild/shipped_fits/`` (``fits.tar.xz`` and ``manifest.json``), each bundle under the content
   signature a first run on another machine computes for the same inputs (:mod:`phenoforge.setbuild.shipped_fits`);
2. the vector of every query text those fits and the bundled benchmark embed (the cohorts' names), exactly as
   this machine's model gave it, into ``phenoforge/engine/dense/shipped/queries.*``
   (:mod:`phenoforge.engine.dense.shipped_queries`): another CPU reads these instead of rounding otherwise;
3. the bundled benchmark's figures with these fits, ``reference_benchmark.json`` beside them: a fresh build on any
   CPU must give the same (``tests/setbuild/test_shipped_fits_other_cpu.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a data folder a fresh build made")
    parser.add_argument("--out", type=Path, default=None, help="where to write the fits (default: the package's)")
    args = parser.parse_args()
    os.environ["PHENOFORGE_DATA_DIR"] = str(args.data.resolve())
    os.environ["PHENOFORGE_FIT_CHOICES"] = "choose"  # the choices are made here, once, and shipped
    os.environ["PHENOFORGE_SHIPPED_FITS"] = "0"  # never install the fits being replaced

    from phenoforge.engine.curated import list_libraries
    from phenoforge.engine.db import connect
    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.engine.dense.model import embed_recipe
    from phenoforge.engine.dense.retriever import recording_queries
    from phenoforge.engine.dense.shipped_queries import write_shipped_queries
    from phenoforge.eval.harness import registered_methods, run_benchmark
    from phenoforge.eval.reference import figures_of
    from phenoforge.methods.set_builder_fits import installed_fit_keys
    from phenoforge.setbuild import ship, shipped_fits
    from phenoforge.setbuild.api import fit_builders, is_user_import

    con = connect()
    dense = load_dense_if_ready(con)
    if dense is None:
        print("no dense index in this data folder: run `python -m phenoforge build --no-fit` first", file=sys.stderr)
        return 2
    libraries = list_libraries(errors=[])
    keys = installed_fit_keys(libraries)
    out = args.out or shipped_fits.SHIPPED_FITS_DIR
    started = time.process_time()
    with recording_queries() as texts:
        for group, extra in keys:
            fitted = fit_builders(con, dense, group, libraries, also_held_out=extra)
            print(f"fitted without {', '.join([g for g in (group, *extra) if g]) or 'nothing'}: {fitted.origin}")
        print(f"fits: {time.process_time() - started:.0f} CPU-s in this process")
        document = {}
        for library in libraries:
            if is_user_import(library):
                continue
            report = run_benchmark(
                con, library.path, library.cohort_ids, methods=registered_methods(), dense=dense, method_timeout=None
            )
            document[library.library_id] = report.model_dump()
            print(f"benchmarked {library.library_id}: {len(report.results)} results")
    recipe = embed_recipe(dense.embed_fn)
    if recipe is None:
        print("the dense index's embed function declares no recipe: nothing shipped", file=sys.stderr)
        return 2
    ordered = sorted(texts)
    dense.clear_query_cache()
    vectors = dense.embed_queries(ordered)  # the shipped ones where shipped, else this machine's: what was read
    made = write_shipped_queries(ordered, vectors, recipe)
    print(f"{made.count} query vectors shipped ({made.vectors_sha256[:12]})")
    packed = ship.pack_shipped_fits(con, dense, libraries, keys, out)
    # the benchmark above ran on this folder's own fits: name them as a user's machine will, the shipped fits
    shipped_as = {
        f"local fit {fit.fitted_file.removeprefix('fitted-').removesuffix('.json')}": (
            f"shipped fit {fit.content_signature}"
        )
        for fit in packed.fits
    }
    for report in document.values():
        for record in report["methods"].values():
            if record.get("fits"):
                if record["fits"] not in shipped_as:
                    print(f"{record['fits']} is no fit that was shipped", file=sys.stderr)
                    return 2
                record["fits"] = shipped_as[record["fits"]]
    figures = figures_of(document, made_with="scripts/ship_fits.py")
    (out / ship.REFERENCE_FILE).write_text(figures.model_dump_json(indent=1) + "\n", encoding="utf-8")
    print(f"reference figures of {len(figures.libraries)} libraries -> {out / ship.REFERENCE_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

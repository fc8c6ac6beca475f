"""Compare two ``benchmark --json`` reports field by field: what differs, beyond what may differ.

Used to show a refactor changed no behaviour: ``python bench/compare_reports.py before.json after.json``
prints every differing path (timing fields, the fitted bundles' file names in notes, since a new storage
format renames the bundle, and fields the second report adds are counted apart), then one line saying
whether anything else differs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

TIMING = re.compile(r"(seconds|_s|elapsed|duration|timestamp|created_at|started_at)$")
BUNDLE = re.compile(r"fitted-[0-9a-f]{16}\.json")


def differences(before: Any, after: Any, path: str = "") -> list[tuple[str, str, str]]:
    """Every (path, first, second) where the two documents differ."""
    if type(before) is not type(after):
        return [(path, type(before).__name__, type(after).__name__)]
    if isinstance(before, dict):
        out = []
        for key in sorted(set(before) | set(after)):
            if key not in before or key not in after:
                out.append(
                    (f"{path}/{key}", "present" if key in before else "absent", "present" if key in after else "absent")
                )
            else:
                out += differences(before[key], after[key], f"{path}/{key}")
        return out
    if isinstance(before, list):
        out = [(path, f"{len(before)} items", f"{len(after)} items")] if len(before) != len(after) else []
        for index, (one, two) in enumerate(zip(before, after, strict=False)):
            out += differences(one, two, f"{path}[{index}]")
        return out
    return [] if before == after else [(path, str(before), str(after))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    found = differences(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
    timing = [d for d in found if TIMING.search(d[0])]
    bundle = [
        d
        for d in found
        if d not in timing
        and BUNDLE.search(d[1])
        and BUNDLE.sub("fitted-X.json", d[1]) == BUNDLE.sub("fitted-X.json", d[2])
    ]
    added = [d for d in found if d[1:] == ("absent", "present")]
    other = [d for d in found if d not in timing and d not in bundle and d not in added]
    print(f"{len(timing)} timing fields differ; {len(bundle)} notes differ only in the fitted bundle's file name")
    if added:
        names = sorted({path.rsplit("/", 1)[-1] for path, _first, _second in added})
        print(f"{len(added)} fields only in the second report (new fields: {', '.join(names)})")
    for path, first, second in other:
        print(f"{path}: {first[:120]!r} -> {second[:120]!r}")
    print("identical otherwise" if not other else f"{len(other)} other differences")
    return 0 if not other else 1


if __name__ == "__main__":
    sys.exit(main())

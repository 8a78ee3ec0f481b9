"""Compare two ``devsched bench --json`` files, ignoring timings: same mappings and figures?

    python scripts/compare_bench.py before.json after.json

Keys that hold measured time (``decision_ms*`` and, under ``--decision-cost measured``,
anything a round's wall time feeds) are skipped; everything else must be equal. Prints the
differences (at most 40) and exits 1 if there are any.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TIMING = ("decision_ms",)


def diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if any(key.startswith(t) for t in TIMING):
                continue
            if key not in a or key not in b:
                out.append(f"{path}.{key}: only in {'after' if key not in a else 'before'}")
            else:
                diff(a[key], b[key], f"{path}.{key}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def main(before: str, after: str) -> int:
    with open(before) as f, open(after) as g:
        a, b = json.load(f), json.load(g)
    out: list[str] = []
    diff(a, b, "", out)
    scenarios = len(a.get("scenarios", []))
    schedulers = len(a.get("config", {}).get("schedulers", []))
    for line in out[:40]:
        print(line)
    print(f"{before} vs {after}: {scenarios} scenarios x {schedulers} schedulers, "
          f"{len(out)} differences (timings ignored)")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

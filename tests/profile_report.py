#!/usr/bin/env python3
"""Where the test suite's time goes: the lines ``SAFEBOX_TEST_PROFILE=FILE``
wrote (tests/conftest.py: ``PREFIX.UID.jsonl``), summed per test file and per
test, largest CPU first. Usage: ``python3 tests/profile_report.py FILE... [-n N]``."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    top = 25
    if "-n" in argv:
        i = argv.index("-n")
        top = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    rows = [json.loads(line) for name in argv for line in open(name) if line.strip()]
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        f = per_file[f"{r['test'].split('::')[0]} (uid {r['uid']})"]
        f[0] += r["cpu"]
        f[1] += r["wall"]
        f[2] += 1
    print(f"{len(rows)} tests: {sum(r['cpu'] for r in rows):.0f} s CPU, {sum(r['wall'] for r in rows):.0f} s wall")
    print(f"\n{'CPU s':>8} {'wall s':>8} {'tests':>6}  file")
    for name, (c, w, n) in sorted(per_file.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{c:8.1f} {w:8.1f} {int(n):6d}  {name}")
    print(f"\n{'CPU s':>8} {'wall s':>8}  test")
    for r in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        print(f"{r['cpu']:8.2f} {r['wall']:8.2f}  {r['test']} (uid {r['uid']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`make bench`: run every benchmark module in its own process and print their tables.

Each `bench/*_bench.py` measures its subject beside a baseline taken in the same run and
prints its own table; this runner only sequences them (so one benchmark's servers never
compete with another's for the two cores) and reports how long each took.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(p.stem for p in here.glob("*_bench.py"))
    if argv:
        unknown = set(argv) - set(names)
        if unknown:
            print(f"unknown benchmark(s): {', '.join(sorted(unknown))}; have {', '.join(names)}")
            return 2
        names = argv
    failed: list[str] = []
    timings: list[tuple[str, float, int]] = []
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, "-m", f"bench.{name}"])
        timings.append((name, time.monotonic() - started, code))
        if code != 0:
            failed.append(name)
    print("\n=== summary ===")
    for name, seconds, code in timings:
        print(f"{name:<28} {seconds:8.1f} s   {'ok' if code == 0 else f'FAILED ({code})'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

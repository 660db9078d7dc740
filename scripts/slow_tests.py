"""Which tests leave the fast tier: each test's measured seconds, kept in
``tests/durations.json``, read by ``tests/conftest.py``.

    .venv/bin/python -m pytest -m "not vllm and not slow" -n 2 \\
        --durations=0 --durations-min=0 -q -p no:cacheprovider | tee fast.log
    .venv/bin/python scripts/slow_tests.py fast.log

reads pytest's durations block (every phase of every test the run ran),
sums each test's setup, call and teardown and merges them into the file: a
test measured again gets its new time, a test the log does not hold keeps
its old one (the fast tier no longer runs the tests that left it, so their
times come from the run that moved them out), and a test that is no longer
collected is dropped. The file keeps the tests at ``FLOOR_S`` or more (a
test measured again below it leaves the file). Any pytest log with a
``--durations=0 --durations-min=0`` block will do (a full run's, for
instance).

The conftest marks ``slow`` every test whose recorded time is at least the
file's ``threshold_s`` (a retriever ``basics`` test stays in the fast tier
whatever its time): the fast tier is then what fits a few minutes on 2
cores. ``--threshold S`` changes the threshold; ``--check`` writes nothing
and exits 1 when merging the log would change the file.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

# The durations block is read by the script that makes CONTRIBUTING's table.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from durations_table import duration_rows  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FILE = REPO / "tests" / "durations.json"
# pytest-xdist's loadgroup scheduling appends "@group" to the ids it reports.
GROUP = re.compile(r"@[\w-]+$")
DEFAULT_THRESHOLD_S = 5.0
# Shorter tests are left out of the file: it records what may cross the threshold.
FLOOR_S = 0.5


def measured(log: str) -> dict[str, float]:
    """Each test's seconds (setup + call + teardown) from a log's durations block.

    Raises:
        ValueError: the log has no durations block, or it has no rows.
    """
    seconds: dict[str, float] = {}
    for printed, _, test in duration_rows(log):
        test = GROUP.sub("", test)
        seconds[test] = seconds.get(test, 0.0) + float(printed)
    if not seconds:
        raise ValueError("the durations block has no rows")
    return seconds


def collected() -> set[str]:
    """The ids of every test the suite collects now."""
    listing = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.strip() for line in listing.splitlines() if "::" in line}


def merged(old: dict, fresh: dict[str, float], present: set[str]) -> dict:
    seconds = {**old.get("seconds", {}), **fresh}
    seconds = {
        test: round(s, 2)
        for test, s in sorted(seconds.items())
        if test in present and s >= FLOOR_S
    }
    return {**old, "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    try:
        fresh = measured(args.log.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as error:
        print(
            f"error: {error}: pass a pytest log run with --durations=0", file=sys.stderr
        )
        return 2
    old = json.loads(FILE.read_text(encoding="utf-8")) if FILE.exists() else {}
    data = merged(old, fresh, collected())
    if args.threshold is not None:
        data["threshold_s"] = args.threshold
    data.setdefault("threshold_s", DEFAULT_THRESHOLD_S)
    data = {"threshold_s": data["threshold_s"], "seconds": data["seconds"]}
    text = json.dumps(data, indent=1) + "\n"
    if args.check:
        return 0 if FILE.exists() and FILE.read_text(encoding="utf-8") == text else 1
    FILE.write_text(text, encoding="utf-8")
    slow = sum(1 for s in data["seconds"].values() if s >= data["threshold_s"])
    print(
        f"wrote {FILE.relative_to(REPO)}: {len(data['seconds'])} tests timed, "
        f"{slow} at or above {data['threshold_s']:g} s (slow)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

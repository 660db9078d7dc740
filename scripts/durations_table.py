"""Where the test run's time goes: the slowest tests of a full run's log as a
Markdown table in CONTRIBUTING.md.

    scripts/test 2>&1 | tee test.log
    .venv/bin/python scripts/durations_table.py test.log

reads pytest's ``slowest N durations`` block (the suite runs with
``--durations=25``) and the run's summary line, and rewrites the table between
``<!-- durations -->`` and ``<!-- /durations -->`` in CONTRIBUTING.md
(``--check``: change nothing, exit 1 when the page differs).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "CONTRIBUTING.md"
MARKED = re.compile(r"(<!-- durations -->\n)(.*?)(<!-- /durations -->)", re.S)
# A test id may hold spaces (a parameter's text): the id runs to the line's end.
ROW = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(.+?)\s*$")
SUMMARY = re.compile(r"=+ (\d+ passed.*?) in ([\d.]+)s")


def duration_rows(log: str) -> list[tuple[str, str, str]]:
    """``(seconds as printed, phase, test id)`` for each row of a pytest
    log's durations block, slowest first.

    Raises:
        ValueError: the log has no durations block.
    """
    start = log.find("slowest")
    if start < 0:
        raise ValueError("no 'slowest N durations' block in the log")
    rows = [ROW.match(line) for line in log[start:].splitlines()[1:]]
    return [(row.group(1), row.group(2), row.group(3)) for row in rows if row]


def table(log: str) -> str:
    """The Markdown table of a pytest log's durations block.

    Raises:
        ValueError: the log has no durations block or no summary line.
    """
    rows = duration_rows(log)
    summary = SUMMARY.search(log)
    if not rows or summary is None:
        raise ValueError("the log has no durations rows or no summary line")
    lines = [
        f"Run: {summary.group(1)} in {float(summary.group(2)) / 60:.1f} min "
        "(the pytest run's wall time, 2 workers).",
        "",
        "| seconds | phase | test |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {seconds} | {phase} | `{test}` |" for seconds, phase, test in rows]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    try:
        body = table(args.log.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as error:
        print(
            f"error: {error} — pass the log of a full scripts/test run", file=sys.stderr
        )
        return 2
    text = PAGE.read_text(encoding="utf-8")
    if not MARKED.search(text):
        print("error: CONTRIBUTING.md has no <!-- durations --> block", file=sys.stderr)
        return 2
    fresh = MARKED.sub(lambda m: m.group(1) + body + m.group(3), text)
    if args.check:
        return 0 if fresh == text else 1
    PAGE.write_text(fresh, encoding="utf-8")
    print(f"wrote {PAGE.name}: {body.count(chr(10)) - 4} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MkDocs hook: publish the figures of benchmarks/results/figures/ under figures/.

The pages link to them as ``figures/<name>.png``; they are drawn by
``earm plots`` from the result JSONs and never copied into docs/ by hand.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

FIGURES = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "figures"


def on_files(files, config):
    for png in sorted(FIGURES.glob("*.png")):
        files.append(
            File.generated(config, f"figures/{png.name}", abs_src_path=str(png))
        )
    return files

"""What every figure shares: matplotlib set up for files, one colour and
marker per policy, titles wrapped, PNGs saved, the machine's load noted."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from earm_jax.eval import labels

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">")


def pyplot():
    """matplotlib's pyplot, drawing to files only (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


POLICY_INDEX: dict[str, int] = {
    **{policy: index for index, policy in enumerate(labels.POLICY_LABELS)},
    "best": 8,
}
"""Each known policy's tab10 colour and marker index: the README's seven in
README order, then the adaptive ``best`` (olive hexagons). Any other policy
gets grey (7) or cyan (9), fixed by its name, so it never takes a known one's."""


def policy_style(policy: str) -> dict[str, Any]:
    """Colour and marker of a policy, the same in every figure and notebook.

    >>> policy_style("best")["marker"], policy_style("semantic")["marker"]
    ('h', 'o')
    """
    import matplotlib

    index = POLICY_INDEX.get(policy)
    if index is None:
        index = (7, 9)[sum(map(ord, policy)) % 2]
    colours = matplotlib.colormaps["tab10"].colors
    return {"color": colours[index], "marker": MARKERS[index]}


def save_figure(figure, path: str | Path) -> Path:
    """Writes ``figure`` as a PNG at ``path`` (folders made) and closes it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    pyplot().close(figure)
    return path


def wrap_title(text: str, width: int = 110) -> str:
    """``text`` wrapped to lines of at most ``width`` characters."""
    return "\n".join(textwrap.wrap(text, width)) if text else ""


def load_note(meta: Mapping[str, Any]) -> str:
    """ "N CPU cores, load average L at the start" from a result's metadata."""
    load = meta.get("load_average_1_5_15") or (meta.get("machine") or {}).get(
        "load_average_1_5_15"
    )
    cpus = meta.get("cpu_count") or (meta.get("machine") or {}).get("cpu_count")
    if not load:
        return ""
    # The load says whether other jobs shared the cores (a run alone on 2
    # cores shows about its own 2).
    return f"{cpus} CPU cores, load average {load[0]:.1f} at the start"


__all__ = [
    "MARKERS",
    "POLICY_INDEX",
    "load_note",
    "policy_style",
    "pyplot",
    "save_figure",
    "wrap_title",
]

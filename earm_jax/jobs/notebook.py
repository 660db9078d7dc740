"""Running a jupytext notebook: the job behind ``earm notebook``.

The notebooks in ``notebooks/`` are MyST markdown (jupytext), so they diff
cleanly. :func:`run_notebook` executes one in a fresh kernel at a chosen size
(``$EARM_NOTEBOOK_SIZE``: ``small`` for a check in about a minute, ``full`` for
the numbers the text quotes) and writes the executed ``.ipynb`` and every
figure it drew as a PNG, numbered in order.
"""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

SIZES = ("small", "full")
"""Values of ``$EARM_NOTEBOOK_SIZE`` the notebooks understand."""


def _figures(notebook, out_dir: Path, stem: str) -> list[Path]:
    paths: list[Path] = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {}) if hasattr(output, "get") else {}
            if "image/png" not in data:
                continue
            path = out_dir / f"{stem}_figure{len(paths) + 1}.png"
            path.write_bytes(base64.b64decode(data["image/png"]))
            paths.append(path)
    return paths


def run_notebook(
    path: str | Path,
    out_dir: str | Path,
    size: str = "small",
    timeout_s: float = 3600.0,
    kernel_name: str = "python3",
) -> tuple[Path, list[Path], float]:
    """Executes the jupytext notebook ``path`` and writes what it produced.

    Args:
      path: a ``notebooks/*.md`` (MyST) or ``.py`` jupytext notebook, or ``.ipynb``.
      out_dir: folder for ``<stem>.ipynb`` and ``<stem>_figure<n>.png``.
      size: ``small`` or ``full`` (passed as ``$EARM_NOTEBOOK_SIZE``).
      timeout_s: per-cell timeout.
      kernel_name: Jupyter kernel to run it in.

    Returns:
      ``(executed notebook path, figure paths, seconds)``.

    Raises:
      ValueError: unknown size or missing notebook.
      nbclient.exceptions.CellExecutionError: a cell failed (the executed
        notebook up to that cell is still written).
    """
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    path, out_dir = Path(path), Path(out_dir)
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    if not path.is_file():
        raise ValueError(f"notebook {str(path)!r} does not exist")
    out_dir.mkdir(parents=True, exist_ok=True)
    notebook = jupytext.read(path)
    env = dict(os.environ, EARM_NOTEBOOK_SIZE=size)
    env.pop("MPLBACKEND", None)  # the kernel's inline backend records figures
    client = NotebookClient(
        notebook,
        timeout=timeout_s,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(out_dir)}},
    )
    target = out_dir / f"{path.stem}.ipynb"
    start = time.perf_counter()
    try:
        client.execute(env=env)
    finally:
        nbformat.write(notebook, target)
    return target, _figures(notebook, out_dir, path.stem), time.perf_counter() - start


__all__ = ["SIZES", "run_notebook"]

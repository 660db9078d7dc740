"""The jupytext notebooks execute end to end (at the small CI size)."""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.md"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.locomo,  # the trained-scorer profile is fitted on LoCoMo
    # nbclient/jupyter_client emit deprecation noise from their own internals.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning:zmq.*"),
]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch, trained_scorer):
    folder, _, manifest = trained_scorer
    monkeypatch.setenv("EARM_NOTEBOOK_SIZE", "small")
    # A real (tiny) trained scorer's profile for the trained-errors section.
    monkeypatch.setenv(
        "EARM_SCORER_PROFILE", str(folder / manifest["profiles"]["turns"])
    )
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = jupytext.read(path)
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute(env=dict(os.environ))
    outputs = [
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    ]
    assert any("notebook grid:" in text for text in outputs)
    assert not any("section 4 skipped" in text for text in outputs)

"""``earm notebook``: runs a jupytext notebook, writes the .ipynb and its PNGs."""

from __future__ import annotations

import json

import pytest

from earm_jax.cli import main

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning:zmq.*"),
]

TINY = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# tiny

```{code-cell} ipython3
import os
import matplotlib.pyplot as plt
figure, axis = plt.subplots()
axis.plot([0, 1], [0, 1])
axis.set_title("size " + os.environ["EARM_NOTEBOOK_SIZE"])
plt.show()
print("done at", os.environ["EARM_NOTEBOOK_SIZE"])
```
"""


def test_earm_notebook_writes_the_executed_notebook_and_its_figures(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MPLBACKEND", "Agg")  # the job must not let this hide figures
    source = tmp_path / "tiny.md"
    source.write_text(TINY)
    out = tmp_path / "out"
    assert main.run(["notebook", str(source), "--size", "full", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    executed = json.loads((out / "tiny.ipynb").read_text())
    texts = [
        "".join(o.get("text", ""))
        for cell in executed["cells"]
        for o in cell.get("outputs", [])
    ]
    assert any("done at full" in text for text in texts)
    figure = out / "tiny_figure1.png"
    assert figure.read_bytes().startswith(b"\x89PNG")
    assert str(figure) in printed

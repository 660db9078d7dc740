"""``examples/embedding_loop.py`` runs offline and pays only for the anchors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "embedding_loop.py"


def test_embedding_loop_pays_for_anchors_only_and_beats_similarity(capsys):
    spec = importlib.util.spec_from_file_location("embedding_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    summary = module.main()
    # the paper's schedule: 10 queries x the whole pool, then 40/25/20/17.5%
    n, t = module.N, module.T
    budgets = [n] * 10 + [20] * 10 + [12] * 10 + [10] * 10 + [9] * (t - 40)
    assert summary["calls"] == sum(budgets) < summary["calls_full"] == t * n
    assert summary["recall_earm"] > summary["recall_semantic"]
    assert "scorer calls instead of" in capsys.readouterr().out


def test_readme_embedding_snippet_pays_only_for_anchors():
    import re

    import jax
    import jax.numpy as jnp
    import numpy as np

    page = (EXAMPLE.parents[1] / "docs" / "embedding.md").read_text()
    section = page[page.index("# Embedding the solver in your JAX code") :]
    namespace: dict = {}
    exec(re.search(r"```python\n(.*?)```", section, re.S).group(1), namespace)
    rng = np.random.default_rng(0)
    memories = jnp.asarray(rng.normal(size=(namespace["M"], 16)), jnp.float32)
    paid = []

    def score_pairs(ids):
        paid.append(len(ids))
        return rng.random(len(ids)).astype(np.float32)

    state, key = namespace["state"], jax.random.key(1)
    for _ in range(11):
        key, step_key = jax.random.split(key)
        query = jnp.asarray(rng.normal(size=16), jnp.float32)
        state, top, info = namespace["agent_step"](
            state, step_key, query, memories, score_pairs
        )
    n = namespace["N"]
    assert paid == [n] * 10 + [int(info.budget)] and int(info.budget) < n
    assert len(top) == 10 and int(info.dropped) == 0


def test_embedding_page_composed_solver_and_checked_blocks_run():
    import re

    page = (EXAMPLE.parents[1] / "docs" / "embedding.md").read_text()
    section = page[page.index("## Composing the solver from its parts") :]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert "compose_solver" in blocks[0] and "ej.checked" in blocks[1]
    namespace: dict = {}
    for block in blocks[:2]:
        exec(block, namespace)
    assert namespace["solver"].config.num_steps == 10

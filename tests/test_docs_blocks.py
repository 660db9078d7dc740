"""Every code block on the docs site runs in a test or says why it cannot.

A block that no test runs carries the marker ``<!-- not-run: REASON -->`` as
the last line before it (CONTRIBUTING.md, "Docs"). The blocks that run are
listed in ``RUN_BY`` with the test that runs them; the fragments that need
names from around them (a query, a stream) run here, given those names.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
    re.S | re.M,
)
NOT_RUN = re.compile(r"<!-- not-run: (?P<reason>\S.{10,}?) -->$")
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"$', re.M)

RUN_BY: dict[tuple[str, int | None], str] = {
    ("docs/agents.md", None): "tests/retriever/test_agents_doc.py",  # every block
    ("docs/embedding.md", 0): "tests/test_example_embedding_loop.py",
    ("docs/embedding.md", 1): "tests/test_docs_blocks.py",
    ("docs/embedding.md", 2): "tests/test_docs_blocks.py",
    ("docs/embedding.md", 3): "tests/test_example_embedding_loop.py",
    ("docs/embedding.md", 4): "tests/test_example_embedding_loop.py",
    ("docs/policies.md", 1): "tests/test_docs_blocks.py",
}
"""(page, block number or None for all of them) -> the test that runs it."""


def _site_pages() -> list[str]:
    """The docs pages and the files they include (``--8<--`` snippets)."""
    pages = [p.relative_to(REPO).as_posix() for p in sorted(REPO.glob("docs/*.md"))]
    included = [
        match["path"]
        for page in pages
        for match in SNIPPET.finditer((REPO / page).read_text(encoding="utf-8"))
    ]
    return pages + included


def _blocks(page: str) -> list[re.Match[str]]:
    return list(FENCE.finditer((REPO / page).read_text(encoding="utf-8")))


def _marker(page: str, block: re.Match[str]) -> re.Match[str] | None:
    before = (REPO / page).read_text(encoding="utf-8")[: block.start()]
    lines = [line.strip() for line in before.splitlines() if line.strip()]
    return NOT_RUN.match(lines[-1]) if lines else None


def _code(page: str, number: int) -> str:
    return _blocks(page)[number]["code"]


@pytest.mark.parametrize("page", _site_pages())
def test_every_block_runs_in_a_test_or_says_why_not(page):
    for number, block in enumerate(_blocks(page)):
        runner = RUN_BY.get((page, number)) or RUN_BY.get((page, None))
        marker = _marker(page, block)
        where = f"{page} block {number} ({block['lang'] or 'no language'})"
        if runner:
            assert marker is None, f"{where} runs in {runner} but is marked not-run"
            text = (REPO / runner).read_text(encoding="utf-8")
            assert Path(page).name in text, f"{runner} does not read {page}"
        else:
            assert marker, f"{where}: run it in a test or mark it <!-- not-run: ... -->"


def test_the_run_list_names_blocks_that_exist():
    for (page, number), runner in RUN_BY.items():
        assert (REPO / runner).is_file(), runner
        assert number is None or number < len(_blocks(page)), (page, number)


@pytest.mark.slow
def test_embedding_page_whole_stream_fragment_runs():
    import jax

    import earm_jax as ej
    from earm_jax.eval.simulate import SimConfig, make_streams

    # The page's solver, at a size that compiles in seconds.
    cfg = ej.SolverConfig(
        num_memories=60, capacity=8, pool_size=16, max_budget=16, rank=2
    )
    solver = ej.online_solver(cfg, ej.paper_policy(pool_size=16))
    streams = make_streams(
        jax.random.key(0), SimConfig(num_memories=60, num_queries=6, pool_size=16), 2
    )
    namespace = {
        "jax": jax,
        "ej": ej,
        "functools": functools,
        "solver": solver,
        "key": jax.random.key(1),
        "stream": jax.tree.map(lambda leaf: leaf[0], streams),
        "keys": jax.random.split(jax.random.key(2), 2),
        "streams": streams,
    }
    exec(_code("docs/embedding.md", 1), namespace)
    assert namespace["infos"].scores.shape == (2, 6, 16)
    assert namespace["final_states"].count.shape == (2,)


@pytest.mark.slow
def test_policies_page_best_beside_the_matrix_pays_rounds_under_its_cap():
    namespace: dict = {}
    exec(_code("docs/policies.md", 1), namespace)
    info = namespace["info"]
    assert 1 <= int(info.rounds) <= 4
    assert 0 < int(info.calls) <= int(info.budget)
    assert namespace["ranking"].shape == (namespace["N"],)
    # The ledger rides in the solver state: the call was paid from it.
    assert float(namespace["state"].policy_state.spent) == int(info.calls)


def test_embedding_page_protocol_block_runs_learned_calls_in_two_rounds():
    namespace: dict = {}
    exec(_code("docs/embedding.md", 2), namespace)
    info = namespace["info"]
    assert int(info.rounds) == 2 and int(info.calls) == namespace["N"]
    assert int(namespace["state"].count) == 1

"""Every snippet of docs/agents.md runs, in order, in one folder: the Python
blocks in one namespace (``mem0_memory`` is a real offline Mem0), the MCP
client configuration by starting its command with the MCP SDK's client.

The scorer folder the page names (``scorer/fold-0``) is a tiny random-weight
cross-encoder here, and ``earm`` and ``sys.executable -m earm_jax.cli`` are
this checkout's command line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fakes import offline_mem0  # noqa: E402
from optional_extras import require_extra  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "agents.md"


def _blocks() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(r"```(\w+)\n(.*?)```", text, flags=re.S)


def test_every_snippet_is_short():
    blocks = _blocks()
    assert [kind for kind, _ in blocks].count("python") == 6
    for _, code in blocks:
        # 17: the MCP client's snippet imports sys to start its own interpreter.
        assert len(code.strip().splitlines()) <= 17, code


def _mem0(folder: Path):
    return offline_mem0(folder)


def _this_checkout(folder: Path, monkeypatch) -> None:
    """``earm`` first on PATH and ``sys.executable`` (the page's Python client
    starts ``sys.executable -m earm_jax.cli``) both run this checkout's command
    line: the MCP SDK hands its server only PATH and a few other variables. The
    page starts three MCP servers; they share a persistent compilation cache,
    so the later ones load the programs the first compiled."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(
        f"#!/bin/sh\nPYTHONPATH={REPO} HF_HUB_OFFLINE=1 JAX_PLATFORMS=cpu "
        f"JAX_COMPILATION_CACHE_DIR={folder / 'jax-cache'} "
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 "
        f'exec {sys.executable} "$@"\n'
    )
    earm = bin_dir / "earm"
    earm.write_text(f'#!/bin/sh\nexec {python} -m earm_jax.cli "$@"\n')
    for shim in (python, earm):
        shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sys, "executable", str(python))


async def _run_config(config: dict) -> None:
    from mcp import Client, StdioServerParameters

    (entry,) = config["mcpServers"].values()
    server = StdioServerParameters(command=entry["command"], args=entry["args"])
    async with Client(server, read_timeout_seconds=600) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert tools == {"remember", "recall", "update", "forget", "get", "stats"}
        reply = await client.call_tool("remember", {"text": "Melanie paints."})
        assert not reply.is_error


def test_the_page_runs(tmp_path, monkeypatch):
    require_extra("mcp")
    require_extra("llama_index.core")
    require_extra("langchain_core")
    sys.path.insert(0, str(REPO / "tests" / "scoring"))
    from tiny_models import build_cross_encoder

    build_cross_encoder(tmp_path / "scorer" / "fold-0")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EARM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _this_checkout(tmp_path, monkeypatch)
    mem0_memory = _mem0(tmp_path / "mem0")
    namespace: dict = {"mem0_memory": mem0_memory}
    try:
        for kind, code in _blocks():
            if kind == "python":
                exec(compile(code, str(PAGE), "exec"), namespace)
            elif kind == "json":
                asyncio.run(_run_config(json.loads(code)))
    finally:
        if "memory" in namespace:
            namespace["memory"].close()
        mem0_memory.vector_store.client.close()
    memory = namespace["memory"]
    assert memory.num_queries >= 6
    memories, stats = namespace["remember_and_recall"] and asyncio.run(
        namespace["remember_and_recall"]()
    )
    assert memories and stats["memories"] == 3  # two runs of the snippet + config

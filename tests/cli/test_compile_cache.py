"""The ``earm`` commands keep compiled programs on disk: a second process loads
what the first compiled, the folder follows JAX's own variable, and
``--no-compile-cache`` turns it off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from earm_jax.cli import main

REPO = Path(__file__).resolve().parents[2]

# Compiles one small program with the command line's cache switched on and
# prints the folder, the number of programs loaded from disk, and the result.
PROGRAM = """
import jax, jax.numpy as jnp
from earm_jax.cli.compile_cache import enable_compilation_cache
hits = []
jax.monitoring.register_event_listener(lambda event, **_: hits.append(event))
folder = enable_compilation_cache()
out = jax.jit(lambda x: jnp.cumsum(jnp.sin(x) * 2.0))(jnp.arange(6.0))
print(folder)
print(hits.count("/jax/compilation_cache/cache_hits"))
print(out.tolist())
"""


def _run(env: dict[str, str]) -> tuple[Path, int, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    folder, hits, values = done.stdout.strip().splitlines()[-3:]
    return Path(folder), int(hits), values


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), env.get("PYTHONPATH")])
    )
    env.update(JAX_PLATFORMS="cpu", JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    env.update(extra)
    return env


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    env = _env(EARM_CACHE_DIR=str(tmp_path / "earm"))
    folder, hits, first = _run(env)
    assert folder == tmp_path / "earm" / "xla"
    assert hits == 0
    assert any(name.endswith("-cache") for name in os.listdir(folder))
    folder_again, hits_again, second = _run(env)
    assert folder_again == folder
    assert hits_again >= 1  # loaded, not compiled
    assert second == first


def test_jax_own_variable_names_the_folder(tmp_path):
    chosen = tmp_path / "chosen"
    env = _env(
        EARM_CACHE_DIR=str(tmp_path / "earm"), JAX_COMPILATION_CACHE_DIR=str(chosen)
    )
    folder, _, _ = _run(env)
    assert folder == chosen
    assert os.listdir(chosen)
    assert not (tmp_path / "earm" / "xla").exists()


def test_the_flag_turns_the_cache_on_and_off(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(main, "enable_compilation_cache", lambda: calls.append(1))
    missing = str(tmp_path / "missing")
    runner = CliRunner()
    runner.invoke(main.app, ["locomo", "--data", missing])
    assert calls == [1]
    runner.invoke(main.app, ["--no-compile-cache", "locomo", "--data", missing])
    assert calls == [1]

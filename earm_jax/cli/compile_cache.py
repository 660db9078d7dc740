"""A persistent XLA compilation cache for the ``earm`` commands.

Every ``earm`` process compiles its solver and policy from scratch: tens of
seconds on a CPU before the first query, each time an agent's MCP server or a
``simulate`` run starts. JAX can keep compiled programs on disk and load them
in the next process; loaded programs are the same machine code, so results do
not change. The command line turns that on (the library never changes
``jax.config``: code that embeds it decides for itself).
"""

from __future__ import annotations

from pathlib import Path

from earm_jax.store.embeddings import default_cache_dir


def compilation_cache_dir() -> Path:
    """``xla/`` in the earm cache folder (``$EARM_CACHE_DIR``, default
    ``~/.cache/earm_jax``)."""
    return default_cache_dir() / "xla"


def enable_compilation_cache() -> Path:
    """Points JAX's persistent compilation cache at :func:`compilation_cache_dir`
    unless the process already set one (JAX reads ``$JAX_COMPILATION_CACHE_DIR``
    itself when it is imported), and returns the folder in use.

    Only programs that took at least JAX's threshold to compile are written
    (``jax_persistent_cache_min_compile_time_secs``, 1 s by default), so the
    folder holds the few large programs that matter, not every small one.
    A cache entry that cannot be read (e.g. a process killed while writing it)
    makes JAX warn and compile again; it never changes a result.
    """
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    folder = compilation_cache_dir()
    jax.config.update("jax_compilation_cache_dir", str(folder))
    return folder

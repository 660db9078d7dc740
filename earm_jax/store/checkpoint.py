"""Atomic, generic checkpoints of any pytree (e.g. a solver state) as ``.npz``.

Leaves are stored under their key paths (``jax.tree_util.keystr``), so a
checkpoint is restored into the structure of a *template* (e.g. a fresh
``solver.init(key)`` for the stored config), whatever the solver's extras hold:
a new solver algorithm needs no change here. A restore checks that the names,
shapes and dtypes match and names the file and the leaf when they do not.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Calls ``write(temporary_path)``, fsyncs, then renames onto ``path``:
    readers see the old file or the new one, never half a file."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    os.close(handle)
    try:
        write(temporary)
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _named_leaves(tree: Any) -> dict[str, Any]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(path): leaf for path, leaf in leaves}


def save_pytree(path: str | Path, tree: Any) -> None:
    """Writes every array leaf of ``tree`` to ``path`` (atomically)."""
    arrays = {name: np.asarray(leaf) for name, leaf in _named_leaves(tree).items()}

    def write(temporary: str) -> None:
        with open(temporary, "wb") as handle:
            np.savez(handle, **arrays)

    atomic_write(path, write)


def load_pytree(path: str | Path, template: Any) -> Any:
    """The checkpoint at ``path`` in the structure of ``template``.

    Raises:
      ValueError: naming ``path`` and the leaf, when the file is unreadable or a
        leaf is missing, extra, or of another shape or dtype than the template's.
    """
    path = Path(path)
    expected = _named_leaves(template)
    try:
        with np.load(path) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"{path}: not a readable checkpoint ({error})") from error
    except Exception as error:  # zipfile.BadZipFile and friends
        raise ValueError(f"{path}: not a readable checkpoint ({error})") from error
    missing = sorted(set(expected) - set(arrays))
    extra = sorted(set(arrays) - set(expected))
    if missing or extra:
        raise ValueError(
            f"{path}: checkpoint leaves do not match the state "
            f"(missing {missing}, unexpected {extra})"
        )
    leaves = []
    for name, leaf in expected.items():
        array = arrays[name]
        if array.shape != np.shape(leaf) or array.dtype != np.asarray(leaf).dtype:
            raise ValueError(
                f"{path}: leaf {name} has shape {array.shape} dtype {array.dtype}, "
                f"expected {np.shape(leaf)} {np.asarray(leaf).dtype}"
            )
        leaves.append(jax.numpy.asarray(array))
    return jax.tree_util.tree_unflatten(jax.tree.structure(template), leaves)


__all__ = ["atomic_write", "load_pytree", "save_pytree"]

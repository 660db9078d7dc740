"""Which scorer ``earm mcp`` serves: its flags checked before anything is
loaded, then the scorer built (an in-process cross-encoder with its folder's
similarity blend, a vLLM server, or none: similarity mode)."""

from __future__ import annotations

import sys
from pathlib import Path

from earm_jax.cli.errors import UserError, user_errors


def check_scorer(
    model: Path | None,
    url: str | None,
    name: str | None,
    backend: str = "torch-float32",
    force_weak: bool = False,
) -> None:
    """Checks the scorer flags (nothing is loaded or created): one scorer or
    none (similarity mode), and a trained-scorer folder its manifest does not
    measure at or below similarity, unless ``force_weak``."""
    if model is not None and url is not None:
        raise UserError(
            "--scorer-model and --scorer-url contradict",
            "pass one of them (or neither, for similarity mode)",
        )
    if model is None and url is None:
        if name or backend != "torch-float32" or force_weak:
            raise UserError(
                "--scorer-name, --scorer-backend and --force-weak-scorer need a scorer",
                "add --scorer-model DIR or --scorer-url URL, or drop them",
            )
        return
    if model is not None:
        from earm_jax.scoring.scorer_manifest import (
            WeakScorerError,
            open_scorer_folder,
        )

        with user_errors("pass a one-label cross-encoder folder"):
            folder = open_scorer_folder(model)
        with user_errors("", WeakScorerError):
            folder.check_strength(force_weak, "--force-weak-scorer")
        return
    if force_weak:
        raise UserError(
            "--force-weak-scorer is for --scorer-model (a trained-scorer "
            "folder), not --scorer-url",
            "drop --force-weak-scorer",
        )
    if backend != "torch-float32":
        raise UserError(
            f"--scorer-backend {backend} is for --scorer-model (in process), not "
            "--scorer-url",
            "drop --scorer-backend (the server picks its own precision)",
        )
    if not name:
        raise UserError(
            "--scorer-url needs --scorer-name", "the model name the server serves"
        )


def served_scorer(
    model: Path | None,
    url: str | None,
    name: str | None,
    mode: str,
    backend: str = "torch-float32",
    embedder=None,
    blend: bool = True,
):
    """The scorer :func:`check_scorer` accepted; ``None`` (similarity mode)
    when the flags name none. ``model`` is a model folder or a trained-scorer
    build's folder, as ``earm locomo --scorer-model`` takes: a build serves the
    fold it names for new data (said on stderr). With ``blend``, a folder's
    similarity blend is applied as ``earm locomo`` applies it (``embedder``:
    the sentence encoder whose cosine it reads)."""
    if model is not None:
        from earm_jax.scoring.cross_encoder import (
            CrossEncoderScorer,
            CrossEncoderSettings,
        )
        from earm_jax.scoring.scorer_manifest import (
            MANIFEST_NAME,
            open_scorer_folder,
            with_folder_blend,
        )

        with user_errors("pass a one-label cross-encoder folder"):
            choice = open_scorer_folder(model).for_new_data()
            if (model / MANIFEST_NAME).is_file():
                print(
                    f"earm mcp: serving {choice.fold} of the trained-scorer build "
                    f"{model} ({choice.folder}: your memories are none of the "
                    "conversations a fold trained on; pass a fold's folder to "
                    "serve another)",
                    file=sys.stderr,
                )
            scorer = CrossEncoderScorer(
                choice.folder,
                CrossEncoderSettings(backend=backend),  # type: ignore[arg-type]
            )
        if not blend:
            return scorer
        with user_errors(
            "pass --embedder the folder's blend was fitted with, or --no-scorer-blend"
        ):
            return with_folder_blend(scorer, choice.folder, embedder)
    if url is None:
        return None
    from earm_jax.scoring.vllm import ScorerConfigError, connect

    with user_errors("start the server or fix --scorer-url", ScorerConfigError):
        return connect(url, name, mode)


__all__ = ["check_scorer", "served_scorer"]

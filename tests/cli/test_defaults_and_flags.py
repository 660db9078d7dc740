"""One source of defaults and one name per option: the CLI, the settings and
the solver's config agree; errors name the flag the user typed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

import earm_jax as ej
from earm_jax.cli import main
from earm_jax.eval.simulate import SimKnobs
from earm_jax.jobs import simulation
from earm_jax.jobs.simulation import SimulationSettings

README = Path(__file__).resolve().parents[2] / "README.md"
SOLVER_FIELDS = ("rank", "l2", "solver", "num_sweeps", "refresh_rows")


def _defaults(command: str) -> dict[str, object]:
    group = typer.main.get_command(main.app)
    return {param.name: param.default for param in group.commands[command].params}


def test_settings_take_the_solver_defaults_from_the_config():
    settings, config = ej.EarmSettings(), ej.SolverConfig._field_defaults
    for field in SOLVER_FIELDS:
        assert getattr(settings, field) == config[field], field
    assert config["solver"] == "incremental"  # the fastest at equal quality
    built = settings.solver_config(num_memories=10, capacity=4, pool_size=5)
    assert built == ej.SolverConfig(10, 4, 5, 5)


@pytest.mark.parametrize("command", ["simulate", "locomo"])
def test_every_command_defaults_to_the_settings(command):
    defaults = _defaults(command)
    settings = ej.EarmSettings()
    assert defaults["solver"] == settings.solver
    assert defaults["num_sweeps"] == settings.num_sweeps
    assert defaults["high_fraction"] == settings.high_fraction


def test_simulate_defaults_are_the_simulation_settings():
    defaults, settings = _defaults("simulate"), SimulationSettings()
    for field in ("streams", "queries", "memories", "pool_size", "rank", "l2", "seed"):
        assert defaults[field] == getattr(settings, field), field
    assert defaults["resamples"] == settings.num_resamples
    assert defaults["noise"] == SimKnobs._field_defaults["scorer_noise"]


def test_the_readme_embedding_example_uses_the_fast_solver():
    text = README.read_text(encoding="utf-8")
    section = text.split("## Embed the solver in your JAX loop", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict[str, object] = {}
    exec(compile(code, "README embedding example", "exec"), namespace)
    assert namespace["solver"].config.solver == "incremental"
    assert int(namespace["state"].count) == 20  # the loop ran


class _Stop(Exception):
    pass


@pytest.fixture
def simulated_settings(monkeypatch):
    """Runs ``earm simulate`` up to the job and returns the settings it built."""
    seen: list[SimulationSettings] = []

    def capture(settings):
        seen.append(settings)
        raise _Stop

    monkeypatch.setattr(simulation, "run_simulation", capture)

    def run(argv: list[str]) -> SimulationSettings:
        with pytest.raises(_Stop):
            main.run(["simulate", "--quiet", *argv])
        return seen[-1]

    return run


def test_simulate_takes_noise_by_the_name_locomo_uses(simulated_settings, capsys):
    assert simulated_settings(["--noise", "0.3"]).knobs["scorer_noise"] == 0.3
    assert simulated_settings([]).knobs["scorer_noise"] == 0.1
    # The old name still works, with a note on stderr.
    assert simulated_settings(["--scorer-noise", "0.2"]).knobs["scorer_noise"] == 0.2
    assert "--scorer-noise is deprecated; use --noise" in capsys.readouterr().err


def test_simulate_defaults_to_the_incremental_solver(simulated_settings):
    settings = simulated_settings([])
    assert settings.solver == "incremental"
    assert settings.stream_solver_config().solver == "incremental"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--rank", "-1"], "--rank must be an int >= 0"),
        (["--num-sweeps", "-2"], "--num-sweeps must be an int >= 0"),
        (["--solver", "sgd"], "--solver must be one of"),
        (["--pool-size", "3000"], "--pool-size=3000 exceeds --memories=2000"),
    ],
)
def test_simulate_errors_name_the_flag_not_the_settings_field(
    capsys, monkeypatch, argv, expected
):
    monkeypatch.setattr(simulation, "run_simulation", None)  # never reached
    status = main.run(["simulate", "--quiet", *argv])
    err = capsys.readouterr().err
    assert status == 2
    assert expected in err
    assert "Settings." not in err


def test_version_and_short_help(capsys):
    assert main.run(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"earm {ej.__version__}"
    assert main.run(["-h"]) == 0
    assert "simulate" in capsys.readouterr().out
    assert main.run(["simulate", "-h"]) == 0
    assert "--noise" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [[], ["simulate"], ["locomo"], ["mcp"], ["train-scorer"], ["retriever", "check"]],
    ids=lambda argv: " ".join(argv) or "earm",
)
def test_help_fits_80_columns_with_whole_option_names(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main.run([*argv, "-h"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    body = "\n".join(line for line in lines if not line.startswith("Usage:"))
    assert "…" not in body and "..." not in body, out  # nothing cut short
    assert "<bool>" not in out, out  # a flag shows as a flag
    if argv == ["locomo"]:
        assert "--false-positive-rate <float>" in out
        assert "--allow-in-sample / --no-allow-in-sample" in out
    if not argv:  # each command's one-line summary, whole
        summary = next(line for line in lines if line.strip().startswith("simulate"))
        assert summary.split(None, 1)[1] == (
            "Run the paper's seven policies on simulated streams."
        )

"""The in-process cross-encoder's backends: names, identity, the ONNX export
and its agreement with torch, and the command-line option (with the
deprecated ``--scorer-dtype``).

The model is the tests' tiny random-weight BERT (built here, no download):
agreement is a property of the computation, not of the weights' quality.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_scorer_backends import REFERENCE, default_across_machines
from earm_jax.cli import main
from earm_jax.cli import options as cli_options
from earm_jax.cli.errors import UserError
from earm_jax.scoring.cache import CachedScorer, ScoreCache
from earm_jax.scoring.cross_encoder import (
    BACKEND_LABELS,
    BACKENDS,
    BUILD_BACKEND,
    DEFAULT_BACKEND,
    CrossEncoderScorer,
    CrossEncoderSettings,
)
from earm_jax.store.embeddings import model_identity

from .tiny_models import build_cross_encoder

QUERY = "when did Caroline go to the park with her sister"
MEMORIES = [
    "Caroline: I went to the park with my sister on monday.",
    "Melanie: coffee",
    "John loves music and went to a birthday party in the city last summer "
    "with his friend Bob and his mother, and they met Alice at the beach.",
    "the dog",
    "Maria visited the mountain",
]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return build_cross_encoder(tmp_path_factory.mktemp("backends") / "model")


@pytest.fixture(scope="module")
def export_cache(tmp_path_factory):
    """The user's cache (where exports go) in a folder of this module: the
    tiny model is exported once for all its tests."""
    folder = tmp_path_factory.mktemp("user-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EARM_CACHE_DIR", str(folder))
        yield folder


def test_the_cli_lists_the_library_backends():
    assert cli_options.SCORER_BACKENDS == BACKENDS
    assert cli_options.DEFAULT_SCORER_BACKEND == DEFAULT_BACKEND == "torch-float32"


def test_the_defaults_are_the_committed_benchmarks_pick():
    # The committed runs (one per kind of machine measured) pick the library's
    # default and what a build scores with: of the backends that keep float32
    # torch's ranking on every kind, the one whose slowest speedup is largest.
    # A rerun that picks another backend must move the constants with it.
    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    runs = [
        json.loads(path.read_text())
        for path in sorted(results.glob("scorer_backends_cpu*.json"))
    ]
    assert len(runs) >= 2
    assert DEFAULT_BACKEND == BUILD_BACKEND == default_across_machines(runs)
    for run in runs:
        assert run["backends"][BUILD_BACKEND]["passes"]
    assert cli_options.BUILD_SCORER_BACKEND == BUILD_BACKEND
    assert cli_options.DEFAULT_SCORER_BACKEND == DEFAULT_BACKEND
    assert set(BACKEND_LABELS) == set(BACKENDS)


def _run(**speedups: float | None) -> dict:
    """A benchmark JSON's ``backends``: a speedup per backend that keeps the
    ranking, ``None`` for one that does not."""
    return {
        "backends": {
            name.replace("_", "-"): {"speedup": speedup or 1.0, "passes": bool(speedup)}
            for name, speedup in speedups.items()
        }
    }


def test_the_default_across_machines_is_the_best_worst_case():
    avx2 = _run(torch_float32=1.0, onnx_float32=0.97, onnx_int8=None)
    native_bf16 = _run(
        torch_float32=1.0, torch_bfloat16=2.5, onnx_float32=1.56, onnx_int8=None
    )
    # bfloat16 is the fastest where it is native but was not measured (never
    # passed) on AVX2; onnx-float32 is slower than the reference on one kind.
    assert default_across_machines([avx2, native_bf16]) == REFERENCE
    assert default_across_machines([native_bf16]) == "torch-bfloat16"
    faster = _run(torch_float32=1.0, onnx_float32=1.2, onnx_int8=None)
    assert default_across_machines([faster, native_bf16]) == "onnx-float32"
    # A tie keeps the reference.
    level = _run(torch_float32=1.0, onnx_float32=1.0)
    assert default_across_machines([level]) == REFERENCE
    with pytest.raises(ValueError, match="every run"):
        default_across_machines([_run(onnx_int8=None), _run(onnx_int8=1.1)])
    with pytest.raises(ValueError, match="at least one"):
        default_across_machines([])


def test_torch_identities_are_those_of_before(tiny_folder):
    """Caches and recorded answers written before backends had names stay
    valid: the torch backends' identity settings did not change."""
    exact = CrossEncoderScorer(tiny_folder)
    fast = CrossEncoderScorer(
        tiny_folder, CrossEncoderSettings(backend="torch-bfloat16")
    )
    assert exact.identity.settings == (("dtype", "float32"), ("max_length", "256"))
    assert fast.identity.settings == (("dtype", "bfloat16"), ("max_length", "256"))


def test_old_settings_json_reads_as_the_torch_backend():
    old = {
        "batch_size": 64,
        "max_length": 256,
        "dtype": "bfloat16",
        "num_threads": None,
    }
    settings = CrossEncoderSettings.from_json(old)
    assert settings.backend == "torch-bfloat16"
    assert (settings.runtime, settings.dtype) == ("torch", "bfloat16")
    with pytest.raises(ValueError, match="backend must be one of"):
        CrossEncoderSettings(backend="onnx-float16")  # type: ignore[arg-type]


def test_every_backend_has_its_own_identity_and_cache_keys(tiny_folder, export_cache):
    pytest.importorskip("onnxruntime")
    scorers = {
        name: CrossEncoderScorer(tiny_folder, CrossEncoderSettings(backend=name))
        for name in BACKENDS
    }
    keys = {scorer.identity.key() for scorer in scorers.values()}
    assert len(keys) == len(BACKENDS)
    assert {scorer.identity.model for scorer in scorers.values()} == {
        model_identity(tiny_folder)
    }
    # One cache: what torch paid is not an answer of the ONNX backend.
    cache = ScoreCache(":memory:")
    torch_cached = CachedScorer(scorers["torch-float32"], cache)
    torch_cached.score(QUERY, MEMORIES)
    onnx_cached = CachedScorer(scorers["onnx-float32"], cache)
    onnx_cached.score(QUERY, MEMORIES)
    assert scorers["onnx-float32"].pairs_scored == len(MEMORIES)
    again = CachedScorer(scorers["torch-float32"], cache)
    again.score(QUERY, MEMORIES)
    assert scorers["torch-float32"].pairs_scored == len(MEMORIES)  # all hits


def test_onnx_float32_agrees_with_torch_float32(tiny_folder, export_cache):
    pytest.importorskip("onnxruntime")
    files_before = sorted(p.name for p in tiny_folder.iterdir())
    identity_before = model_identity(tiny_folder)
    torch_scorer = CrossEncoderScorer(tiny_folder)
    onnx_scorer = CrossEncoderScorer(
        tiny_folder, CrossEncoderSettings(backend="onnx-float32", batch_size=2)
    )
    pairs = [(QUERY, memory) for memory in MEMORIES] + [("coffee?", "yes coffee")]
    expected = torch_scorer.logits(pairs)
    got = onnx_scorer.logits(pairs)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    scores = onnx_scorer.score(QUERY, MEMORIES)
    assert all(s.ok and 0.0 <= s.value <= 1.0 for s in scores)
    # The export lives in the user's cache, never in the model folder.
    exports = list(export_cache.glob("onnx/*-float32-*/model.onnx"))
    assert len(exports) == 1
    assert sorted(p.name for p in tiny_folder.iterdir()) == files_before
    assert model_identity(tiny_folder) == identity_before
    # A second scorer reuses it.
    stamp = exports[0].stat().st_mtime_ns
    CrossEncoderScorer(
        tiny_folder, CrossEncoderSettings(backend="onnx-float32")
    ).logits(pairs[:1])
    assert exports[0].stat().st_mtime_ns == stamp


def test_onnx_int8_scores_every_pair(tiny_folder, export_cache):
    pytest.importorskip("onnxruntime")
    scorer = CrossEncoderScorer(tiny_folder, CrossEncoderSettings(backend="onnx-int8"))
    scores = scorer.score(QUERY, MEMORIES)
    assert all(s.ok and 0.0 <= s.value <= 1.0 for s in scores)
    assert len(list(export_cache.glob("onnx/*-int8-*/model.onnx"))) == 1


def test_onnx_backend_without_onnxruntime_says_what_to_install(
    tiny_folder, monkeypatch
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime" else real(name, *a),
    )
    with pytest.raises(ValueError, match=r"earm_jax\[scorer\]"):
        CrossEncoderScorer(tiny_folder, CrossEncoderSettings(backend="onnx-float32"))


def test_scorer_dtype_is_deprecated_and_warns_once(monkeypatch, capsys):
    monkeypatch.setattr(cli_options, "_WARNED", set())
    assert cli_options.scorer_backend(None, "bfloat16") == "torch-bfloat16"
    assert cli_options.scorer_backend(None, "float32") == "torch-float32"
    assert cli_options.scorer_backend("torch-float32", "float32") == "torch-float32"
    warnings = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(warnings) == 1
    assert "--scorer-dtype is deprecated" in warnings[0]
    assert "--scorer-backend torch-bfloat16" in warnings[0]
    with pytest.raises(UserError, match="disagrees with --scorer-backend"):
        cli_options.scorer_backend("onnx-float32", "float32")
    with pytest.raises(UserError, match="--scorer-dtype must be"):
        cli_options.scorer_backend(None, "int8")


def _one_line_error(capsys, argv: list[str]) -> str:
    status = main.run(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert status == 2, (status, captured.out, captured.err)
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["locomo", "--scorer", "cross-encoder", "--scorer-model", "m"],
        ["train-scorer", "--out", "out"],
        ["mcp", "folder", "--scorer-model", "m"],
    ],
)
def test_a_bad_backend_name_is_one_line_naming_the_option(
    command, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EARM_LOCOMO_DATA", str(tmp_path))
    line = _one_line_error(capsys, [*command, "--scorer-backend", "onnx-fp16"])
    assert "--scorer-backend must be one of" in line
    assert "onnx-fp16" in line


def test_locomo_refuses_a_backend_for_a_scorer_that_runs_no_model(capsys, tmp_path):
    line = _one_line_error(
        capsys,
        ["locomo", "--data", str(tmp_path), "--scorer-backend", "onnx-float32"],
    )
    assert "--scorer-backend onnx-float32 goes with --scorer cross-encoder" in line


def test_torch_batches_are_sorted_by_tokens_and_change_no_score(tiny_folder):
    """The torch path hands sentence-transformers one batch at a time, the
    pairs sorted by token count (longest first), and returns the logits in
    the pairs' order: those of one sentence-transformers call over all."""
    import torch

    scorer = CrossEncoderScorer(tiny_folder, CrossEncoderSettings(batch_size=2))
    model = scorer._load()
    pairs = [(QUERY, memory) for memory in MEMORIES] + [("coffee?", "yes coffee")]
    expected = model.predict(
        [list(p) for p in pairs], activation_fn=torch.nn.Identity()
    )
    calls = []
    predict = model.predict

    def recording(batch, **kwargs):
        calls.append([tuple(pair) for pair in batch])
        return predict(batch, **kwargs)

    model.predict = recording
    got = scorer.logits(pairs)
    # Other padding, other float32 sums: equal to a few ulps, not bit for bit.
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [len(batch) for batch in calls] == [2, 2, 2]
    tokens = {pair: len(model.tokenizer(*pair)["input_ids"]) for pair in pairs}
    sizes = [tokens[pair] for batch in calls for pair in batch]
    assert sizes == sorted(sizes, reverse=True)
    assert sorted(pair for batch in calls for pair in batch) == sorted(pairs)

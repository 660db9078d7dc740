"""How far the in-process cross-encoder is from what this CPU can do.

The scorer's cost is matrix products: a BERT layer on a pair of ``L`` tokens
multiplies ``4 d^2 + 2 d f`` weights per token (the attention's four
projections and the feed-forward pair) and ``2 L d`` for the attention itself
(``QK^T`` and the weighted sum), with ``d`` the width and ``f`` the
feed-forward width. This counts those FLOPs (multiply-add = 2) for the same
LoCoMo pairs :mod:`benchmarks.bench_scorer_backends` scores, at each pair's own
length (``useful``) and as the scorer pays them (``padded``: batches sorted by
token count, each padded to its longest pair; ``padding_overhead`` the FLOPs
this adds, and ``padding_overhead_sorted_by_characters`` what
sentence-transformers' own order would add), times ``torch-float32`` on them,
and sets the achieved rate against two ceilings measured in the same process,
with the same threads, on the model's own matrix shapes:

* ``float32``: ``torch.matmul`` of one padded batch's activations by each
  weight matrix (the three shapes a layer multiplies by);
* ``int8``: the same products through ``torch.ao``'s dynamically quantized
  ``Linear`` (int8 weights and activations, what an int8 backend can reach on
  this CPU's instructions).

``ceiling_speedup`` is a ceiling's rate over the achieved rate: the most any
backend computing the same FLOPs at that precision could gain, were nothing
but the matrix products left; ``ceiling_speedup_without_padding`` the same had
no batch any padding either. A speedup beyond those needs fewer FLOPs (a
smaller model, shorter pairs), not a faster backend.

    python -m benchmarks.scorer_roofline --scorer-model DIR --data DIR \\
        --memories turns,observations --questions 4 --out OUT
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks._common import print_table, write_json  # noqa: E402
from benchmarks.bench_scorer_backends import (  # noqa: E402
    add_pool_arguments,
    setting_pools,
)
from earm_jax.jobs.machine_load import OtherLoad, load_record  # noqa: E402
from earm_jax.jobs.metadata import provenance  # noqa: E402
from earm_jax.scoring.token_batches import (  # noqa: E402
    encode_pairs,
    longest_first_batches,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pool_arguments(parser, questions=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: its own)"
    )
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def model_shape(folder: Path) -> dict[str, int]:
    """The model's depth and widths, read from its ``config.json``."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    return {
        "layers": int(config.num_hidden_layers),
        "hidden": int(config.hidden_size),
        "intermediate": int(config.intermediate_size),
        "heads": int(config.num_attention_heads),
    }


def sequence_flops(length: int, shape: dict[str, int]) -> float:
    """FLOPs of the model's matrix products on one sequence of ``length``
    tokens: the encoder's, then the pooler and the one-label head
    (multiply-add = 2)."""
    d, f = shape["hidden"], shape["intermediate"]
    per_layer = 2 * length * (4 * d * d + 2 * d * f) + 4 * length * length * d
    return shape["layers"] * per_layer + 2 * d * d + 2 * d


def batch_widths(
    lengths: np.ndarray, keys: Sequence[int], batch_size: int
) -> list[tuple[int, int]]:
    """``(pairs, padded width)`` of each batch when the pairs are sorted by
    ``keys``, longest first, in batches of ``batch_size``, each padded to its
    longest pair in tokens (``lengths``). The scorer's keys are the token
    counts themselves (:mod:`earm_jax.scoring.token_batches`)."""
    return [
        (len(rows), int(lengths[rows].max()))
        for rows in longest_first_batches(keys, batch_size)
    ]


def token_lengths(folder: Path, pairs: list[tuple[str, str]], max_length: int):
    """Each pair's token count as the scorer encodes it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    encoded = encode_pairs(tokenizer, pairs, max_length)
    return np.array([len(ids) for ids in encoded["input_ids"]])


def matmul_ceilings(
    shape: dict[str, int], rows: int, repeats: int = 5
) -> dict[str, dict[str, Any]]:
    """GFLOP/s of one padded batch's (``rows`` tokens) products by the
    model's three weight shapes, float32 and dynamically quantized int8."""
    import torch

    d, f = shape["hidden"], shape["intermediate"]
    # Per layer: Q, K, V, output (d -> d, four times), then d -> f and f -> d.
    products = [(d, d, 4), (d, f, 1), (f, d, 1)]
    generator = torch.Generator().manual_seed(0)
    out: dict[str, dict[str, Any]] = {}
    for precision in ("float32", "int8"):
        seconds, flops = 0.0, 0.0
        for inner, outer, count in products:
            x = torch.randn(rows, inner, generator=generator)
            linear = torch.nn.Linear(inner, outer, bias=False)
            if precision == "int8":
                with warnings.catch_warnings():
                    # torch.ao's eager quantization is deprecated, not gone:
                    # its int8 kernels are still what it runs.
                    warnings.simplefilter("ignore")
                    linear = torch.ao.quantization.quantize_dynamic(
                        torch.nn.Sequential(linear),
                        {torch.nn.Linear},
                        dtype=torch.qint8,
                    )
            with torch.inference_mode():
                linear(x)  # warm-up
                times = []
                for _ in range(repeats):
                    begin = time.perf_counter()
                    for _ in range(count):
                        linear(x)
                    times.append(time.perf_counter() - begin)
            seconds += statistics.median(times)
            flops += count * 2.0 * rows * inner * outer
        out[precision] = {"gflops_per_s": flops / seconds / 1e9, "rows": rows}
    return out


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    import torch

    from earm_jax.scoring.cross_encoder import CrossEncoderScorer, CrossEncoderSettings

    meta = provenance("python -m benchmarks.scorer_roofline", argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    folder, conversations, pools = setting_pools(args)
    settings = list(pools)
    pairs = [
        (pool["query"], memory)
        for setting in settings
        for pool in pools[setting]
        for memory in pool["memories"]
    ]
    shape = model_shape(folder)
    lengths = token_lengths(folder, pairs, args.max_length)
    widths = batch_widths(lengths, lengths, args.batch_size)
    useful = float(sum(sequence_flops(int(n), shape) for n in lengths))
    padded = float(sum(n * sequence_flops(w, shape) for n, w in widths))

    scorer = CrossEncoderScorer(
        folder,
        CrossEncoderSettings(
            backend="torch-float32",
            batch_size=args.batch_size,
            max_length=args.max_length,
            num_threads=args.threads,
        ),
    )
    scorer.logits(pairs[:8])  # load and warm up
    load_before = os.getloadavg()
    other = OtherLoad()
    times = []
    for round_index in range(args.rounds):
        begin = time.perf_counter()
        scorer.logits(pairs)
        times.append(time.perf_counter() - begin)
        print(f"[roofline] round {round_index + 1}/{args.rounds}", file=sys.stderr)
    seconds = statistics.median(times)
    mean_width = float(
        np.average([w for _, w in widths], weights=[n for n, _ in widths])
    )
    ceilings = matmul_ceilings(shape, args.batch_size * round(mean_width))
    load_after = os.getloadavg()
    achieved = padded / seconds / 1e9
    useful_rate = useful / seconds / 1e9
    for ceiling in ceilings.values():
        ceiling["ceiling_speedup"] = ceiling["gflops_per_s"] / achieved
        ceiling["ceiling_speedup_without_padding"] = (
            ceiling["gflops_per_s"] / useful_rate
        )
    # sentence-transformers' own order, by characters, for comparison.
    characters = [len(q) + len(m) for q, m in pairs]
    by_characters = batch_widths(lengths, characters, args.batch_size)
    padded_by_characters = float(
        sum(n * sequence_flops(w, shape) for n, w in by_characters)
    )
    return {
        "benchmark": "scorer_roofline",
        "backend": "torch-float32",
        "model": shape,
        "pairs": len(pairs),
        "tokens": {
            "mean": float(lengths.mean()),
            "max": int(lengths.max()),
            "mean_padded_width": mean_width,
        },
        "gflop_per_pair": {
            "useful": useful / len(pairs) / 1e9,
            "padded": padded / len(pairs) / 1e9,
        },
        "padding_overhead": padded / useful - 1.0,
        "padding_overhead_sorted_by_characters": padded_by_characters / useful - 1.0,
        "seconds": seconds,
        "times_s": times,
        "pairs_per_s": len(pairs) / seconds,
        "achieved_gflops_per_s": achieved,
        "ceilings": ceilings,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "conversations": [c.sample_id for c in conversations],
        "memories": settings,
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        **load_record(other.share(), load_before, load_after),
        "versions": {"torch": importlib.metadata.version("torch")},
        "meta": meta,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(arguments)
    result = run(args, arguments)
    rows = [
        {
            "rate": "torch-float32, achieved",
            "gflops_per_s": result["achieved_gflops_per_s"],
            "ceiling_speedup": 1.0,
        }
    ] + [
        {
            "rate": f"{name} matrix products, ceiling",
            "gflops_per_s": ceiling["gflops_per_s"],
            "ceiling_speedup": ceiling["ceiling_speedup"],
        }
        for name, ceiling in result["ceilings"].items()
    ]
    print_table(
        rows,
        ["rate", "gflops_per_s", "ceiling_speedup"],
        f"{result['pairs']} pairs, {result['pairs_per_s']:.1f} pairs/s, "
        f"{result['gflop_per_pair']['padded']:.2f} GFLOP a pair "
        f"(padding +{100 * result['padding_overhead']:.0f}%)",
    )
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()

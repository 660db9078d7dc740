"""The in-process scorer's backends side by side: pairs/s and agreement.

Scores the same LoCoMo pairs (each question's pool, turns and/or observations)
with every backend of :class:`~earm_jax.scoring.cross_encoder.CrossEncoderScorer`
and compares them with ``torch-float32``, the reference:

* ``pairs_per_s``: the pairs over the median of the timed rounds; the rounds
  are paired and interleaved (each round runs every backend once on the same
  pairs, in a rotated order), so load from other jobs falls on all of them
  alike; ``speedup`` is the median over rounds of the reference's time over
  the backend's;
* ``max_abs_delta``: the largest |score - reference score| (probabilities);
* ``top10_overlap``: per question, how many of the reference's top 10 are in
  the backend's top 10, averaged over questions;
* ``recall@10_full``: Recall@10 of Full (the pool ranked by the score the
  project uses: the folder's similarity blend, where it has one).

``default`` is what the rule picks on this run: the fastest backend whose
Recall@10 of Full is within 0.002 of the reference's and whose mean top-10
overlap is at least 9.5 (``torch-float32`` when none is faster). The load
average before and after is recorded, and the share of the CPU other
processes took while the passes ran (``machine_busy`` above a quarter;
:mod:`earm_jax.jobs.machine_load`).

    python -m benchmarks.bench_scorer_backends --scorer-model SCORERS/turns-cv3 \\
        --data ../shared/data/locomo --memories turns,observations \\
        --questions 8 --out benchmarks/results/scorer_backends_cpu.json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks._common import print_table, write_json  # noqa: E402
from earm_jax.eval.ranking_agreement import (  # noqa: E402
    MIN_OVERLAP,
    RECALL_TOLERANCE,
    agreement,
    keeps_the_ranking,
    labelled_pools,
    ranked_probability,
)
from earm_jax.jobs.machine_load import OtherLoad, load_record  # noqa: E402
from earm_jax.jobs.metadata import provenance  # noqa: E402

REFERENCE = "torch-float32"


def add_pool_arguments(parser: argparse.ArgumentParser, questions: int) -> None:
    """The options that choose the model folder and the LoCoMo pools scored
    (:func:`setting_pools`), shared by the scorer benchmarks."""
    parser.add_argument(
        "--scorer-model",
        required=True,
        help="a model folder, or a trained-scorer folder (its first fold)",
    )
    parser.add_argument("--data", required=True, help="LoCoMo file or folder")
    parser.add_argument("--memories", default="turns", help="turns,observations")
    parser.add_argument(
        "--conversations",
        default="",
        help="comma list (default: the ones the fold held out, else the first)",
    )
    parser.add_argument(
        "--questions",
        type=int,
        default=questions,
        help="labelled questions per setting",
    )
    parser.add_argument("--pool-size", type=int, default=200)
    parser.add_argument("--cache-dir", default=None)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from earm_jax.scoring.cross_encoder import BACKENDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pool_arguments(parser, questions=8)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--threads", type=int, default=None, help="per backend (default: its own)"
    )
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def model_folder(path: str) -> tuple[Path, tuple[str, ...]]:
    """The model folder to score with and the conversations it held out."""
    from earm_jax.scoring.scorer_manifest import open_scorer_folder

    folder = open_scorer_folder(path)
    if not folder.folds:
        return folder.root, ()
    first = folder.folds[0]
    held = tuple(entry["id"] for entry in first.get("held_out", []))
    return folder.root / first["folder"], held


def setting_pools(
    args: argparse.Namespace,
) -> tuple[Path, list[Any], dict[str, list[dict[str, Any]]]]:
    """The model folder, the conversations and, per memory setting, the first
    ``args.questions`` labelled questions' pools that the options of
    :func:`add_pool_arguments` name."""
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations
    from earm_jax.locomo.streams import build_streams
    from earm_jax.store.embeddings import Embedder

    folder, held = model_folder(args.scorer_model)
    wanted = tuple(c for c in args.conversations.split(",") if c) or held[:1]
    conversations = select_conversations(load_locomo(args.data), wanted, 0)
    if not wanted:
        conversations = conversations[:1]
    embedder = Embedder(cache_dir=args.cache_dir)
    settings = [name.strip() for name in args.memories.split(",") if name.strip()]
    pools = {
        setting: [
            pool
            for stream in build_streams(
                conversations, embedder, setting=setting, pool_size=args.pool_size
            )
            for pool in labelled_pools(stream, args.questions)
        ][: args.questions]
        for setting in settings
    }
    return folder, conversations, pools


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    from earm_jax.scoring.cross_encoder import (
        CrossEncoderScorer,
        CrossEncoderSettings,
    )
    from earm_jax.scoring.similarity_blend import load_blend

    # The commit and command of the code that runs, read before it runs.
    meta = provenance("python -m benchmarks.bench_scorer_backends", argv)
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    if REFERENCE not in backends:
        backends.insert(0, REFERENCE)
    folder, conversations, pools = setting_pools(args)
    blend = load_blend(folder)
    settings = list(pools)
    pairs = {
        setting: [(p["query"], m) for p in pools[setting] for m in p["memories"]]
        for setting in settings
    }
    scorers, load_s = {}, {}
    for name in backends:
        begin = time.perf_counter()
        scorer = CrossEncoderScorer(
            folder,
            CrossEncoderSettings(
                backend=name,  # type: ignore[arg-type]
                batch_size=args.batch_size,
                num_threads=args.threads,
            ),
        )
        scorer.logits(pairs[settings[0]][:8])  # load, export on first use, warm up
        scorers[name], load_s[name] = scorer, time.perf_counter() - begin
        print(f"[backends] {name}: ready in {load_s[name]:.1f} s", file=sys.stderr)
    load_before = os.getloadavg()
    other = OtherLoad()
    times: dict[str, dict[str, list[float]]] = {
        s: {b: [] for b in backends} for s in settings
    }
    logits: dict[str, dict[str, np.ndarray]] = {s: {} for s in settings}
    for round_index in range(args.rounds):
        order = (
            backends[round_index % len(backends) :]
            + backends[: round_index % len(backends)]
        )
        for setting in settings:
            for name in order:
                begin = time.perf_counter()
                values = np.asarray(scorers[name].logits(pairs[setting]))
                times[setting][name].append(time.perf_counter() - begin)
                logits[setting].setdefault(name, values)
        print(f"[backends] round {round_index + 1}/{args.rounds}", file=sys.stderr)
    load_after = os.getloadavg()
    others = other.share()
    per_setting: dict[str, Any] = {}
    pooled: dict[str, dict[str, Any]] = {b: {"seconds": 0.0} for b in backends}
    all_reference, all_scores = [], {b: [] for b in backends}
    for setting in settings:
        split = np.cumsum([len(p["memories"]) for p in pools[setting]])[:-1]
        scores = {
            name: [
                ranked_probability(chunk, pool, blend)
                for chunk, pool in zip(
                    np.split(logits[setting][name], split), pools[setting], strict=True
                )
            ]
            for name in backends
        }
        rows = {}
        for name in backends:
            median = statistics.median(times[setting][name])
            ratios = [
                ref / own
                for ref, own in zip(
                    times[setting][REFERENCE], times[setting][name], strict=True
                )
            ]
            rows[name] = {
                "pairs": len(pairs[setting]),
                "pairs_per_s": len(pairs[setting]) / median,
                "speedup": statistics.median(ratios),
                "times_s": times[setting][name],
                **agreement(pools[setting], scores[REFERENCE], scores[name]),
            }
            pooled[name]["seconds"] += median
            all_scores[name] += scores[name]
        all_reference += scores[REFERENCE]
        per_setting[setting] = rows
    total_pairs = sum(len(p) for p in pairs.values())
    every_pool = [pool for setting in settings for pool in pools[setting]]
    summary = {}
    for name in backends:
        summary[name] = {
            "pairs_per_s": total_pairs / pooled[name]["seconds"],
            "speedup": pooled[REFERENCE]["seconds"] / pooled[name]["seconds"],
            **agreement(every_pool, all_reference, all_scores[name]),
            "load_s": load_s[name],
        }
    reference_recall = summary[REFERENCE]["recall@10_full"]
    for row in summary.values():
        row["passes"] = keeps_the_ranking(
            row["top10_overlap"], row["recall@10_full"] - reference_recall
        )
    passing = [name for name in backends if summary[name]["passes"]]
    default = max(passing, key=lambda name: summary[name]["pairs_per_s"])
    return {
        "benchmark": "scorer_backends",
        "default": default,
        "reference": REFERENCE,
        "rule": {
            "recall@10_tolerance": RECALL_TOLERANCE,
            "min_top10_overlap": MIN_OVERLAP,
        },
        "backends": summary,
        "memories": per_setting,
        "model": folder.name,
        "similarity_blend": blend is not None,
        "conversations": [c.sample_id for c in conversations],
        "questions_per_setting": {s: len(pools[s]) for s in settings},
        "pairs": total_pairs,
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "threads": args.threads,
        **load_record(others, load_before, load_after),
        "versions": {
            package: _version(package)
            for package in ("torch", "transformers", "onnxruntime", "onnx")
        },
        "meta": meta,
    }


def default_across_machines(runs: Sequence[dict[str, Any]]) -> str:
    """The library default that committed runs on several machine kinds
    support: among the backends that keep the reference's ranking in every
    run, the one whose smallest speedup over ``torch-float32`` is largest
    (the reference on a tie). A backend missing from a run never passed
    there: one default has to suit every kind of machine measured, and a
    backend that is fastest on one kind can be several times slower on
    another (bfloat16 without native instructions)."""
    if not runs:
        raise ValueError("runs must hold at least one benchmark JSON")
    passing = [
        {name for name, row in run["backends"].items() if row["passes"]} for run in runs
    ]
    candidates = sorted(set.intersection(*passing))
    if not candidates:
        raise ValueError("no backend keeps the ranking in every run")
    return max(
        candidates,
        key=lambda name: (
            min(run["backends"][name]["speedup"] for run in runs),
            name == REFERENCE,
        ),
    )


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(arguments)
    result = run(args, arguments)
    rows = [
        {"backend": name, **{k: v for k, v in row.items() if not isinstance(v, list)}}
        for name, row in result["backends"].items()
    ]
    print_table(
        rows,
        [
            "backend",
            "pairs_per_s",
            "speedup",
            "max_abs_delta",
            "top10_overlap",
            "recall@10_full",
            "passes",
        ],
        f"{result['pairs']} pairs, {args.rounds} paired rounds; default "
        f"{result['default']}" + (" (machine busy)" if result["machine_busy"] else ""),
    )
    if not all(math.isfinite(r["pairs_per_s"]) for r in result["backends"].values()):
        raise SystemExit("a backend did not run")
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()

"""Which training recipe makes the trained scorer a better ranker: variants of
``earm train-scorer`` compared on fold 0, chosen on held-back questions only.

Each variant is the default command plus some options (``--variant
NAME=OPTIONS``; the first is the reference, normally the default recipe with
no options). For each:

1. ``earm train-scorer --folds 3 --memories SETTING OPTIONS`` trains fold 0 (5
   of the 7 shared conversations) and is stopped once the fold's model is
   written; a variant whose ``fold-0.json`` is already in ``--builds`` is not
   retrained. ``--memories`` (turns by default) is the setting judged; a
   variant may train on more (``--memories turns,observations`` in its
   OPTIONS), never on fewer than the judged one;
2. the fold's scorer (calibrated, blended with similarity, as ``earm locomo``
   uses it) scores the whole pools of two sets of questions:

   - **held back**: the seeded tenth of each training conversation's
     questions that the build kept out of training (it fits the calibration
     and the similarity blend on them, never the network); the recipe is
     chosen on these;
   - **held out**: every question of the two conversations fold 0 never saw
     (26 and 48); reported after the choice, never used for it.

3. per question, Recall@10 of Full (the pool ranked by the answers) and of
   Semantic; each variant's Full Recall@10 minus the reference's with a paired
   bootstrap 95% CI, on both sets.

The rule: a variant replaces the reference only if its held-back difference
has the CI above 0; otherwise the reference stays. Answers go through the
score cache (``$EARM_CACHE_DIR/scores.sqlite``), so a rerun scores nothing.
Writes a JSON with the command, commit, date, machine and load.

    python experiments/recipe_search.py --data ../shared/data/locomo \\
        --variant default= --variant lr8e-5="--learning-rate 8e-5" \\
        --out experiments/results/recipe_search_turns.json
    python experiments/recipe_search.py --data ../shared/data/locomo \\
        --memories observations --variant default= \\
        --variant joint="--memories turns,observations" \\
        --out experiments/results/recipe_search_observations.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FOLDS = 3
FOLD = "fold-0"
K = 10


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``NAME=OPTIONS`` -> the name and the options as arguments."""
    name, sep, options = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(
            f"--variant must be NAME=OPTIONS (OPTIONS may be empty), got {text!r}"
        )
    return name, shlex.split(options)


def train_fold_zero(
    data: str, setting: str, out: Path, options: list[str], backend: str, log: Path
) -> float:
    """Runs ``earm train-scorer`` until fold 0's model is written, then stops
    it; returns the wall seconds (0 when the fold was already there)."""
    if (out / f"{FOLD}.json").is_file():
        return 0.0
    earm = Path(sys.executable).with_name("earm")
    command = [
        str(earm), "train-scorer", "--data", data, "--memories", setting,
        "--folds", str(FOLDS), "--out", str(out), "--scorer-backend", backend,
        *options,
    ]  # fmt: skip
    started = time.perf_counter()
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            while not (out / f"{FOLD}.json").is_file():
                if process.poll() is not None:
                    raise RuntimeError(
                        f"earm train-scorer exited {process.returncode} before "
                        f"{FOLD} was written; see {log}"
                    )
                time.sleep(5)
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait()
    return time.perf_counter() - started


def scored_recall(
    scorer: Any, streams: dict[str, Any], questions: dict[str, np.ndarray]
) -> dict[str, Any]:
    """Scores the chosen questions' pools; per labelled question, Recall@10 of
    Full and of Semantic, and the scorer's quality over them."""
    from earm_jax.eval.scorer_quality import recall_at
    from earm_jax.jobs.fold_answers import score_pools, scored_questions
    from earm_jax.jobs.locomo_report import streams_scorer_quality

    full, semantic, ids, scored = [], [], [], []
    for sample, chosen in questions.items():
        stream = streams[sample]
        answers = score_pools(scorer, stream, chosen)
        part = scored_questions(stream, answers)
        arrays = part.arrays
        labelled = arrays.num_relevant > 0
        args = (arrays.relevant, arrays.valid, arrays.num_relevant, K)
        full.append(recall_at(arrays.scores, *args)[labelled])
        semantic.append(recall_at(arrays.similarity, *args)[labelled])
        rows = np.flatnonzero(chosen)[labelled]
        ids.extend(f"{sample}:{int(t)}" for t in rows)
        scored.append(part)
    quality = streams_scorer_quality(scored, (K,))
    return {
        "questions": ids,
        "full": np.concatenate(full),
        "semantic": np.concatenate(semantic),
        "quality": {
            "auc": quality["auc"],
            "auc_similarity": quality["auc_similarity"],
            "within_query_auc": quality["within_query_auc"],
            "ece": quality["reliability"]["ece"],
        },
    }


def trained_settings(setting: str, options: list[str]) -> list[str]:
    """The memory settings a variant trains on: the judged one, or the last
    ``--memories`` in its options (as the command line reads it)."""
    if "--memories" not in options:
        return [setting]
    last = len(options) - 1 - options[::-1].index("--memories")
    if last + 1 >= len(options):
        raise ValueError("a variant's --memories needs a value")
    return [s.strip() for s in options[last + 1].split(",") if s.strip()]


def evaluate(
    folder: Path,
    record: dict[str, Any],
    streams: dict[str, Any],
    seed: int,
    backend: str,
    cache_dir: str | None,
) -> dict[str, Any]:
    """Fold 0's scorer on its held-back and its held-out questions."""
    from earm_jax.jobs.train_scorer import held_back_questions
    from earm_jax.jobs.train_scorer_job import TrainScorerJob
    from earm_jax.scoring.cache import CachedScorer, ScoreCache
    from earm_jax.scoring.cross_encoder import CrossEncoderSettings
    from earm_jax.scoring.scorer_manifest import model_scorer
    from earm_jax.store.embeddings import Embedder, default_cache_dir

    training_ids = [entry["id"] for entry in record["trained_on"]]
    held_out = [entry["id"] for entry in record["held_out"]]
    back = held_back_questions(
        {s: len(streams[s].meta.query_texts) for s in training_ids},
        TrainScorerJob.validation_fraction,
        seed,
    )
    counts = {s: int(v.sum()) for s, v in back.items()}
    if counts != record["held_back_questions"]:
        raise ValueError(
            f"the held-back draw {counts} is not the build's "
            f"{record['held_back_questions']} (another seed or data?)"
        )
    out_questions = {
        s: np.ones(len(streams[s].meta.query_texts), bool) for s in held_out
    }
    scorer = model_scorer(
        folder, CrossEncoderSettings(backend=backend), Embedder(cache_dir=cache_dir)
    )
    cache = ScoreCache(default_cache_dir() / "scores.sqlite")
    cached = CachedScorer(scorer, cache)
    try:
        return {
            "held_back": scored_recall(cached, streams, back),
            "held_out": scored_recall(cached, streams, out_questions),
        }
    finally:
        cache.close()
        scorer.close()


def summary(result: dict[str, Any]) -> dict[str, Any]:
    full, semantic = result["full"], result["semantic"]
    return {
        "questions": int(full.size),
        "full": float(full.mean()),
        "semantic": float(semantic.mean()),
        "full_minus_semantic": float(full.mean() - semantic.mean()),
        **result["quality"],
    }


def contrast(treatment: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    from earm_jax.eval.stats import contrast_ci

    if treatment["questions"] != reference["questions"]:
        raise ValueError("the variants were judged on different questions")
    ci = contrast_ci(treatment["full"], reference["full"], seed=0)
    return {"estimate": ci.estimate, "low": ci.low, "high": ci.high}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("EARM_LOCOMO_DATA"))
    parser.add_argument(
        "--variant",
        type=parse_variant,
        action="append",
        required=True,
        help="NAME=OPTIONS of earm train-scorer; the first is the reference",
    )
    parser.add_argument(
        "--memories",
        default="turns",
        choices=["turns", "observations"],
        help="the memory setting whose pools judge the variants",
    )
    parser.add_argument(
        "--builds",
        default=None,
        help=(
            "where the variants' builds go (default $EARM_CACHE_DIR/recipe-search "
            "for turns, recipe-search-SETTING otherwise)"
        ),
    )
    parser.add_argument("--backend", default="onnx-float32")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data (or $EARM_LOCOMO_DATA) is required")

    from earm_jax.jobs.machine_load import OtherLoad, load_record
    from earm_jax.jobs.metadata import provenance, write_json
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations
    from earm_jax.locomo.streams import build_streams
    from earm_jax.store.embeddings import Embedder, default_cache_dir

    names = [name for name, _ in args.variant]
    if len(set(names)) != len(names):
        parser.error(f"--variant names must differ, got {names}")
    for name, options in args.variant:
        if args.memories not in trained_settings(args.memories, options):
            parser.error(
                f"variant {name!r} does not train on {args.memories}, the "
                "setting it is judged on"
            )
    folder = "recipe-search" + ("" if args.memories == "turns" else f"-{args.memories}")
    builds = Path(args.builds or default_cache_dir() / folder)
    builds.mkdir(parents=True, exist_ok=True)
    conversations = select_conversations(load_locomo(args.data), (), 0)
    streams = dict(
        zip(
            [c.sample_id for c in conversations],
            build_streams(
                conversations,
                Embedder(cache_dir=args.cache_dir),
                setting=args.memories,
            ),
            strict=True,
        )
    )
    load_before = os.getloadavg()
    other = OtherLoad()
    results: dict[str, Any] = {}
    rows = []
    for name, options in args.variant:
        out = builds / name
        settings = trained_settings(args.memories, options)
        kept = out / "variant.json"
        if (out / f"{FOLD}.json").is_file():
            # A build from before variants were labelled trained on turns.
            was = json.loads(kept.read_text()) if kept.is_file() else {}
            if was.get("settings", ["turns"]) != settings:
                parser.error(
                    f"{out} was trained on {was.get('settings', ['turns'])}, "
                    f"variant {name!r} asks for {settings}: give another --builds"
                )
        seconds = train_fold_zero(
            args.data, args.memories, out, options, args.backend, builds / f"{name}.log"
        )
        if not kept.is_file():
            write_json(kept, {"options": options, "settings": settings})
        record = json.loads((out / f"{FOLD}.json").read_text())
        seed = int(options[options.index("--seed") + 1]) if "--seed" in options else 0
        begin = time.perf_counter()
        judged = evaluate(
            out / record["folder"], record, streams, seed, args.backend, args.cache_dir
        )
        results[name] = judged
        row = {
            "variant": name,
            "options": options,
            "training": record["training"],
            "model_identity": record.get("model_identity"),
            "wall_seconds_training": round(seconds, 1),
            "wall_seconds_scoring": round(time.perf_counter() - begin, 1),
            "held_back": summary(judged["held_back"]),
            "held_out": summary(judged["held_out"]),
        }
        reference = results[names[0]]
        if name != names[0]:
            row["held_back"]["full_minus_reference"] = contrast(
                judged["held_back"], reference["held_back"]
            )
            row["held_out"]["full_minus_reference"] = contrast(
                judged["held_out"], reference["held_out"]
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
    better = [
        row for row in rows[1:] if row["held_back"]["full_minus_reference"]["low"] > 0
    ]
    chosen = max(better, key=lambda r: r["held_back"]["full"]) if better else rows[0]
    write_json(
        args.out,
        {
            "experiment": "recipe_search",
            "memories": args.memories,
            "fold": FOLD,
            "rule": (
                "a variant replaces the reference only if its held-back Full "
                "Recall@10 minus the reference's has the paired 95% CI above 0"
            ),
            "chosen": chosen["variant"],
            "variants": rows,
            "backend": args.backend,
            **load_record(other.share(), load_before, os.getloadavg()),
            **provenance("python", ["experiments/recipe_search.py", *sys.argv[1:]]),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

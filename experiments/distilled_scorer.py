"""A distilled cross-encoder: the 6-layer scorer's answers taught to its own
first K layers, judged against it on the conversations it held out.

A K-layer model trained on the labels alone keeps only 5-6 of the 6-layer
model's top 10 (``smaller_scorer.py``). Distillation asks whether the same
arithmetic can copy the bigger model's ranking instead:

1. the teacher is fold 0 of a trained-scorer build (``earm train-scorer``);
   it scores the pools of the first ``--train-questions`` labelled questions
   of each conversation it trained on, and of the first ``--eval-questions``
   of each it held out (``--teacher-backend``: ``onnx-float32`` gives float32
   torch's scores within 1e-6, faster);
2. the student is the teacher cut to its first ``--layers`` layers (its
   embeddings, lower layers and head, :func:`keep_layers`), trained for
   ``--steps`` steps on the training pools' answers only: each step takes
   ``--per-step`` questions, and from each the teacher's 16 best candidates
   and 16 others at random; the loss is the listwise KL divergence between
   the two models' softmax over those 32 plus a tenth of the squared error of
   the logits (so the teacher's similarity blend still applies);
3. at each checkpoint the student scores the held-out pools in float32 and
   both are ranked by the teacher's blend: top-10 overlap with the teacher
   and Recall@10 of Full, with the paired 95% CI of the difference, the
   agreement rule of ``earm_jax.eval.ranking_agreement`` (overlap at
   least 9.5 of 10, Recall@10 within 0.002).

A K-layer student does the arithmetic of the K-layer cut, whose speed
``smaller_scorer.py`` measured; this script times nothing. Writes a JSON with
the command, commit, date, machine and load.

    python experiments/distilled_scorer.py --teacher scorers/turns-cv3-500 \\
        --layers 2 --steps 1500 --out experiments/results/distilled_scorer_L2.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GROUP = 32


def question_pools(
    data: str, conversations: list[str], questions: int, cache_dir: str | None
) -> list[dict[str, Any]]:
    """The turn pools of the first ``questions`` labelled questions of each
    conversation: query, memory texts, similarity and evidence labels."""
    from earm_jax.eval.ranking_agreement import labelled_pools
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations
    from earm_jax.locomo.streams import build_streams
    from earm_jax.store.embeddings import Embedder

    chosen = select_conversations(load_locomo(data), tuple(conversations), 0)
    streams = build_streams(chosen, Embedder(cache_dir=cache_dir), setting="turns")
    return [pool for stream in streams for pool in labelled_pools(stream, questions)]


def pool_logits(scorer: Any, pools: list[dict[str, Any]]) -> list[np.ndarray]:
    """Each pool's raw logits from ``scorer`` (one call over every pair)."""
    pairs = [(pool["query"], memory) for pool in pools for memory in pool["memories"]]
    values = np.asarray(scorer.logits(pairs), np.float64)
    ends = np.cumsum([len(pool["memories"]) for pool in pools])
    return np.split(values, ends[:-1])


def agreement(
    pools: list[dict[str, Any]], teacher: list[np.ndarray], student: list[np.ndarray]
) -> dict[str, Any]:
    """Top-10 overlap with the teacher and both Recall@10 of Full, per
    question and pooled, with the paired 95% CI of the difference."""
    from earm_jax.eval.ranking_agreement import (
        keeps_the_ranking,
        overlaps,
        recall_of_top,
    )
    from earm_jax.eval.stats import contrast_ci

    overlap = overlaps(teacher, student)
    mine, theirs = recall_of_top(pools, student), recall_of_top(pools, teacher)
    ci = contrast_ci(mine, theirs, num_resamples=10_000)
    difference = float((mine - theirs).mean())
    return {
        "questions": len(pools),
        "top10_overlap": float(overlap.mean()),
        "top10_overlap_min": int(overlap.min()),
        "recall@10_full_student": float(mine.mean()),
        "recall@10_full_teacher": float(theirs.mean()),
        "difference": difference,
        "difference_ci95": [float(ci.low), float(ci.high)],
        "keeps_the_ranking": keeps_the_ranking(float(overlap.mean()), difference),
    }


def student_logits(
    model: Any, tokenizer: Any, pools: list[dict[str, Any]], cache_dir: str | None
) -> list[np.ndarray]:
    """The student's float32 logits, scored as the library scores a folder
    (``CrossEncoderScorer``, ``torch-float32``)."""
    from earm_jax.scoring.cross_encoder import CrossEncoderScorer
    from earm_jax.scoring.cross_encoder_training import save_model

    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_model(tokenizer, model, Path(tmp) / "student", 256)
        with CrossEncoderScorer(folder, cache_dir=cache_dir) as scorer:
            out = pool_logits(scorer, pools)
    model.train()
    return out


def distil(
    args: argparse.Namespace,
    teacher_folder: Path,
    train: list[dict[str, Any]],
    train_logits: list[np.ndarray],
    checkpoint: Any,
) -> dict[str, Any]:
    """Trains the cut teacher on the teacher's answers; ``checkpoint(step,
    model, tokenizer)`` runs at step 0, halfway and at the end."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from earm_jax.scoring.cross_encoder_training import keep_layers

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(
        str(teacher_folder), local_files_only=True
    )
    model = AutoModelForSequenceClassification.from_pretrained(
        str(teacher_folder), local_files_only=True
    )
    keep_layers(model, args.layers)
    checkpoint(0, model, tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, args.steps // 10)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (args.steps - step) / (args.steps - warmup))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    losses = []
    started = time.perf_counter()
    model.train()
    for step in range(1, args.steps + 1):
        queries, memories, targets = [], [], []
        for index in rng.choice(len(train), args.per_step, replace=False):
            pool, logits = train[index], train_logits[index]
            order = np.argsort(-logits, kind="stable")
            half = GROUP // 2
            rest = rng.choice(order[half:], GROUP - half, replace=False)
            picked = np.concatenate([order[:half], rest])
            queries += [pool["query"]] * GROUP
            memories += [pool["memories"][j] for j in picked]
            targets += logits[picked].tolist()
        encoded = tokenizer(
            queries,
            memories,
            truncation="longest_first",
            max_length=256,
            padding=True,
            return_tensors="pt",
        )
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            out = model(**encoded).logits[:, 0]
        out = out.float().view(args.per_step, GROUP)
        target = torch.tensor(targets, dtype=torch.float32).view(args.per_step, GROUP)
        listwise = torch.nn.functional.kl_div(
            out.log_softmax(-1),
            target.log_softmax(-1),
            log_target=True,
            reduction="batchmean",
        )
        loss = listwise + 0.1 * ((out - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if step % 100 == 0:
            print(
                f"[distil] step {step}/{args.steps}: loss "
                f"{np.mean(losses[-100:]):.3f} ({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
            )
        if step in (args.steps // 2, args.steps):
            checkpoint(step, model, tokenizer)
    if args.save:
        from earm_jax.scoring.cross_encoder_training import save_model

        save_model(tokenizer, model, args.save, 256)
    return {
        "seconds": time.perf_counter() - started,
        "first_loss": float(np.mean(losses[:100])),
        "last_loss": float(np.mean(losses[-100:])),
    }


def first_fold(path: Path) -> tuple[Path, dict[str, Any]]:
    """Fold 0's model folder and entry (the conversations it trained on and
    held out) of a build, or of a fold folder. A build stopped after its
    first fold has no manifest yet: its ``fold-0`` is read, whose record
    :func:`open_scorer_folder` finds beside it."""
    from earm_jax.scoring.scorer_manifest import MANIFEST_NAME, open_scorer_folder

    opened_as_is = (path / MANIFEST_NAME).is_file() or (path / "config.json").is_file()
    try:
        opened = open_scorer_folder(path if opened_as_is else path / "fold-0")
    except ValueError as error:
        raise SystemExit(f"--teacher: {error}") from None
    if not opened.folds:
        raise SystemExit(f"--teacher: {str(path)!r} is not a fold of a build")
    fold = opened.folds[0]
    return opened.root / fold["folder"], fold


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", required=True, help="a trained-scorer build")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--per-step", type=int, default=2, help="questions a step")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--train-questions", type=int, default=60, help="per training conversation"
    )
    parser.add_argument(
        "--eval-questions", type=int, default=40, help="per held-out conversation"
    )
    parser.add_argument("--teacher-backend", default="onnx-float32")
    parser.add_argument(
        "--data", default=str(REPO.parent / "shared" / "data" / "locomo")
    )
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--save", type=Path, default=None, help="the student folder")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    from earm_jax.eval.ranking_agreement import ranked_probability
    from earm_jax.jobs.machine_load import OtherLoad, load_record
    from earm_jax.jobs.metadata import provenance, write_json
    from earm_jax.scoring.cross_encoder import CrossEncoderScorer, CrossEncoderSettings
    from earm_jax.scoring.similarity_blend import load_blend

    teacher_folder, fold = first_fold(Path(args.teacher))
    trained_on = [entry["id"] for entry in fold["trained_on"]]
    held_out = [entry["id"] for entry in fold["held_out"]]
    train = question_pools(args.data, trained_on, args.train_questions, args.cache_dir)
    evaluated = question_pools(args.data, held_out, args.eval_questions, args.cache_dir)
    blend = load_blend(teacher_folder)

    load_before = os.getloadavg()
    other = OtherLoad()
    started = time.perf_counter()
    settings = CrossEncoderSettings(backend=args.teacher_backend)
    with CrossEncoderScorer(teacher_folder, settings, cache_dir=args.cache_dir) as t:
        train_logits = pool_logits(t, train)
        teacher_eval = pool_logits(t, evaluated)
    teacher_seconds = time.perf_counter() - started
    teacher_ranked = [
        ranked_probability(logits, pool, blend)
        for logits, pool in zip(teacher_eval, evaluated, strict=True)
    ]
    checkpoints: dict[str, Any] = {}

    def checkpoint(step: int, model: Any, tokenizer: Any) -> None:
        logits = student_logits(model, tokenizer, evaluated, args.cache_dir)
        ranked = [
            ranked_probability(values, pool, blend)
            for values, pool in zip(logits, evaluated, strict=True)
        ]
        found = agreement(evaluated, teacher_ranked, ranked)
        checkpoints[str(step)] = found
        print(
            f"[distil] step {step}: top-10 overlap {found['top10_overlap']:.2f} "
            f"(min {found['top10_overlap_min']}), Recall@10 of Full "
            f"{found['recall@10_full_student']:.3f} against the teacher's "
            f"{found['recall@10_full_teacher']:.3f}",
            file=sys.stderr,
        )

    training = distil(args, teacher_folder, train, train_logits, checkpoint)
    result = {
        "experiment": "distilled_scorer",
        "teacher": {
            "build": str(args.teacher),
            "fold": fold["name"],
            "model_identity": fold.get("model_identity"),
            "trained_on": trained_on,
            "held_out": held_out,
            "backend": args.teacher_backend,
            "seconds": teacher_seconds,
        },
        "layers": args.layers,
        "training_questions": len(train),
        "evaluated_questions": len(evaluated),
        "training": training,
        "checkpoints": checkpoints,
        "final": checkpoints[str(args.steps)],
        **load_record(other.share(), load_before, os.getloadavg()),
        **provenance("python", ["experiments/distilled_scorer.py", *sys.argv[1:]]),
    }
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

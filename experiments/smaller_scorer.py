"""A smaller cross-encoder: the default recipe on the first K of MiniLM's 6
layers, against the 6-layer build, on the conversations both held out.

The scorer is a query's real cost (docs/performance.md), and a backend can at
best about double the float32 6-layer model's speed on 2 AVX2 cores (it runs
at about half their arithmetic peak): fewer layers can do more. This measures
what a K-layer model costs in ranking and saves in time:

1. the build, every setting at the recipe's default but ``--layers K``:
   ``earm train-scorer --data ../shared/data/locomo --memories turns
   --folds 3 --layers K --out BUILD`` (stopped once its first fold is done
   when only that fold's conversations are compared), then
   ``earm record-scores --scorer-model BUILD --out ANSWERS.npz``. The
   committed builds predate ``--layers``: they started from the folder
   ``base --layers K --out DIR`` writes, passed as ``--base-model DIR``
   (the same starting weights);
2. ``compare --small K:ANSWERS.npz:BUILD/fold-0 ... --reference FILE``: on
   every conversation both recorded files hold, each question's Recall@10 of
   Full (the model alone, and with its fitted similarity blend) for both,
   the paired difference with its 95% CI over questions and the top-10
   overlap; then the pairs/s of each K-layer model and of a 6-layer model of
   the same shape (the base MiniLM with a fresh head: the trained model's
   arithmetic) on the same pairs, in paired rounds, per backend.

Writes a JSON with the command, commit, date, machine and load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def write_base(layers: int, out: Path) -> dict[str, Any]:
    """The bundled MiniLM cut to its embeddings, first ``layers`` layers and
    pooler (:func:`~earm_jax.scoring.cross_encoder_training.keep_layers`),
    as a BERT folder for ``--base-model``."""
    from transformers import AutoModel, AutoTokenizer

    from earm_jax.scoring.cross_encoder_training import keep_layers
    from earm_jax.store.embeddings import default_model_path, model_identity

    source = default_model_path()
    model = AutoModel.from_pretrained(str(source), local_files_only=True)
    of_layers = model.config.num_hidden_layers
    parameters_full = sum(p.numel() for p in model.parameters())
    try:
        keep_layers(model, layers)
    except ValueError as error:
        raise SystemExit(f"--{error}") from None
    out.mkdir(parents=True, exist_ok=False)
    model.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(source), local_files_only=True).save_pretrained(
        str(out)
    )
    return {
        "source": model_identity(source),
        "layers": layers,
        "of_layers": of_layers,
        "parameters": sum(p.numel() for p in model.parameters()),
        "parameters_full": parameters_full,
    }


def _top10(scores: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``int[T, 10]``: each question's ten best pool positions (ties by
    position, unscored last), as :func:`recall_at` orders them."""
    keyed = np.where(valid & np.isfinite(scores), scores, -np.inf)
    return np.argsort(-keyed, axis=1, kind="stable")[:, :10]


def _recall(scores: np.ndarray, arrays: Any, labelled: np.ndarray) -> np.ndarray:
    """Recall@10 of each labelled question's pool ordered by ``scores``."""
    from earm_jax.eval.scorer_quality import recall_at

    return recall_at(scores, arrays.relevant, arrays.valid, arrays.num_relevant, 10)[
        labelled
    ]


def _paired_ci(small: np.ndarray, reference: np.ndarray) -> list[float]:
    """The paired bootstrap 95% CI over questions of the mean difference."""
    from earm_jax.eval.stats import contrast_ci

    ci = contrast_ci(small, reference, num_resamples=10_000)
    return [float(ci.low), float(ci.high)]


def compare_rankings(
    small_file: str, reference_file: str, data: str, cache_dir: str | None
) -> dict[str, Any]:
    """Recall@10 of Full for both files' answers on the conversations both
    hold (the same pools: candidates and text digests must agree), per
    question, for the model alone and for its fitted similarity blend."""
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations
    from earm_jax.locomo.streams import build_streams
    from earm_jax.scoring.recorded_answers import RecordedAnswers, blended_answers
    from earm_jax.store.embeddings import Embedder

    files = {
        "small": RecordedAnswers.load(small_file),
        "reference": RecordedAnswers.load(reference_file),
    }
    if files["small"].setting != files["reference"].setting:
        raise SystemExit("the two files record different memory settings")
    shared = sorted(
        set(files["small"].conversations) & set(files["reference"].conversations)
    )
    if not shared:
        raise SystemExit("the two files hold no conversation in common")
    conversations = select_conversations(load_locomo(data), tuple(shared), 0)
    embedder = Embedder(cache_dir=cache_dir)
    streams = build_streams(conversations, embedder, setting=files["small"].setting)
    pooled: dict[str, dict[str, list[np.ndarray]]] = {}
    per_conversation: dict[str, Any] = {}
    semantic: list[np.ndarray] = []
    for stream, conversation in zip(streams, conversations, strict=True):
        cid = conversation.sample_id
        answers = {name: f.conversations[cid] for name, f in files.items()}
        for field in ("candidates", "query_sha256", "memory_sha256"):
            first, second = (getattr(a, field) for a in answers.values())
            if not np.array_equal(first, second):
                raise SystemExit(f"conversation {cid}: the files' {field} differ")
        arrays = stream.arrays
        pools = np.where(arrays.valid, arrays.candidates, -1)
        if not np.array_equal(pools, answers["small"].candidates):
            raise SystemExit(f"conversation {cid}: the data's pools are not the files'")
        labelled = arrays.num_relevant > 0

        semantic.append(_recall(arrays.similarity, arrays, labelled))
        for weight_name, weight in (("model", 0.0), ("blend", 1.0)):
            given, tops = {}, {}
            for name, entry in answers.items():
                blend = files[name].blends.get(entry.fold)
                logits = entry.logits.astype(np.float64)
                scores = blended_answers(logits, arrays.similarity, blend, weight)
                scores = np.where(np.isfinite(logits), scores, np.nan)
                given[name] = _recall(scores, arrays, labelled)
                tops[name] = _top10(scores, arrays.valid)[labelled]
            overlap = np.array(
                [
                    len(set(a.tolist()) & set(b.tolist()))
                    for a, b in zip(tops["small"], tops["reference"], strict=True)
                ]
            )
            bucket = pooled.setdefault(
                weight_name, {"small": [], "reference": [], "overlap": []}
            )
            bucket["small"].append(given["small"])
            bucket["reference"].append(given["reference"])
            bucket["overlap"].append(overlap)
            per_conversation.setdefault(cid, {})[weight_name] = {
                "questions": int(labelled.sum()),
                "recall@10_full_small": float(given["small"].mean()),
                "recall@10_full_reference": float(given["reference"].mean()),
                "top10_overlap": float(overlap.mean()),
            }
    out: dict[str, Any] = {
        "conversations": shared,
        "recall@10_semantic": float(np.concatenate(semantic).mean()),
        "per_conversation": per_conversation,
    }
    for weight_name, bucket in pooled.items():
        small = np.concatenate(bucket["small"])
        reference = np.concatenate(bucket["reference"])
        overlap = np.concatenate(bucket["overlap"])
        out[weight_name] = {
            "questions": int(small.size),
            "recall@10_full_small": float(small.mean()),
            "recall@10_full_reference": float(reference.mean()),
            "difference": float((small - reference).mean()),
            "difference_ci95": _paired_ci(small, reference),
            "top10_overlap": float(overlap.mean()),
            "top10_overlap_min": int(overlap.min()),
        }
    return out


def _pairs(data: str, cache_dir: str | None, questions: int) -> list[tuple[str, str]]:
    """The whole turn pools of the first ``questions`` questions of
    conversations 26 and 48 (the same pairs for every model timed)."""
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations
    from earm_jax.locomo.streams import build_streams
    from earm_jax.store.embeddings import Embedder

    conversations = select_conversations(load_locomo(data), ("26", "48"), questions)
    streams = build_streams(
        conversations, Embedder(cache_dir=cache_dir), setting="turns"
    )
    pairs = []
    for stream in streams:
        meta, arrays = stream.meta, stream.arrays
        for t in range(arrays.candidates.shape[0]):
            for n in np.flatnonzero(arrays.valid[t]):
                memory = meta.memory_texts[int(arrays.candidates[t, n])]
                pairs.append((meta.query_texts[t], memory))
    return pairs


def time_models(
    models: dict[str, str],
    data: str,
    cache_dir: str | None,
    questions: int,
    rounds: int,
    backends: list[str],
) -> dict[str, Any]:
    """Pairs/s of each model folder (by name) and of a 6-layer model of the
    same shape (``"6"``: the base MiniLM with a fresh head, the trained
    model's arithmetic) on the same pairs. Each round runs every (model,
    backend) once in a rotated order, so load from elsewhere falls on all."""
    from earm_jax.jobs.machine_load import OtherLoad, load_record
    from earm_jax.scoring.cross_encoder import CrossEncoderScorer, CrossEncoderSettings
    from earm_jax.scoring.cross_encoder_training import load_base_model, save_model
    from earm_jax.store.embeddings import default_model_path

    pairs = _pairs(data, cache_dir, questions)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, model = load_base_model(default_model_path())
        six = save_model(tokenizer, model, Path(tmp) / "six-layers", 256)
        del model
        folders = {"6": str(six), **models}
        scorers = {
            (name, backend): CrossEncoderScorer(
                folder,
                CrossEncoderSettings(backend=backend),  # type: ignore[arg-type]
            )
            for name, folder in folders.items()
            for backend in backends
        }
        keys = list(scorers)
        for key in keys:  # load, export on first use, warm up
            scorers[key].logits(pairs[:8])
        times: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
        load_before = os.getloadavg()
        other = OtherLoad()
        for r in range(rounds):
            for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
                start = time.perf_counter()
                scorers[key].logits(pairs)
                times[key].append(time.perf_counter() - start)
            print(f"[speed] round {r + 1}/{rounds}", file=sys.stderr)
        others = other.share()
        load_after = os.getloadavg()
        for scorer in scorers.values():
            scorer.close()
    reference = np.array(times[("6", backends[0])])
    per_model: dict[str, Any] = {}
    for name in folders:
        per_model[name] = {}
        for backend in backends:
            seconds = np.array(times[(name, backend)])
            per_model[name][backend] = {
                "pairs_per_s": len(pairs) / float(np.median(seconds)),
                # Paired: the median over rounds of the reference's time over
                # this one's, the reference being 6 layers on the first backend.
                "speedup": float(np.median(reference / seconds)),
                "times_s": seconds.tolist(),
            }
    return {
        "pairs": len(pairs),
        "rounds": rounds,
        "reference": f"6 layers, {backends[0]}",
        "models": per_model,
        **load_record(others, load_before, load_after),
    }


def summary(rankings: dict[str, Any], speed: dict[str, Any]) -> dict[str, Any]:
    """One row per layer count (``"6"``: the reference build) for the docs'
    table: Full's Recall@10 (the model alone, with its blend), the paired
    difference from 6 layers with the blend, the top-10 overlap with 6
    layers' and the speed on each backend."""
    any_small = next(iter(rankings.values()))
    rows: dict[str, Any] = {
        "6": {
            "recall@10_full_model": any_small["model"]["recall@10_full_reference"],
            "recall@10_full_blend": any_small["blend"]["recall@10_full_reference"],
            "questions": any_small["blend"]["questions"],
        }
    }
    for layers, found in rankings.items():
        rows[layers] = {
            "recall@10_full_model": found["model"]["recall@10_full_small"],
            "recall@10_full_blend": found["blend"]["recall@10_full_small"],
            "difference_blend": found["blend"]["difference"],
            "difference_blend_low": found["blend"]["difference_ci95"][0],
            "difference_blend_high": found["blend"]["difference_ci95"][1],
            "difference_model": found["model"]["difference"],
            "difference_model_low": found["model"]["difference_ci95"][0],
            "difference_model_high": found["model"]["difference_ci95"][1],
            "top10_overlap_blend": found["blend"]["top10_overlap"],
            "top10_overlap_blend_min": found["blend"]["top10_overlap_min"],
            "questions": found["blend"]["questions"],
        }
    for layers, backends in speed["models"].items():
        for backend, measured in backends.items():
            rows[layers][f"pairs_per_s_{backend}"] = measured["pairs_per_s"]
            rows[layers][f"speedup_{backend}"] = measured["speedup"]
    return rows


def _small(text: str) -> tuple[str, str, str]:
    """``LAYERS:ANSWERS.npz:MODEL_FOLDER`` of one smaller build."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0].isdigit():
        raise argparse.ArgumentTypeError(
            f"--small takes LAYERS:ANSWERS.npz:MODEL_FOLDER, got {text!r}"
        )
    return parts[0], parts[1], parts[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    base = sub.add_parser("base", help="write the K-layer base folder")
    base.add_argument("--layers", type=int, required=True)
    base.add_argument("--out", type=Path, required=True)
    compare = sub.add_parser("compare", help="rankings and speed against 6 layers")
    compare.add_argument(
        "--small",
        type=_small,
        action="append",
        required=True,
        help="LAYERS:ANSWERS.npz:MODEL_FOLDER of a smaller build (repeatable)",
    )
    compare.add_argument(
        "--reference", required=True, help="the 6-layer build's recorded answers"
    )
    compare.add_argument(
        "--data", default=str(REPO.parent / "shared" / "data" / "locomo")
    )
    compare.add_argument("--cache-dir", default=None)
    compare.add_argument(
        "--questions", type=int, default=4, help="timed, per conversation"
    )
    compare.add_argument("--rounds", type=int, default=3)
    compare.add_argument("--backends", default="torch-float32,onnx-float32")
    compare.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    if args.command == "base":
        print(json.dumps(write_base(args.layers, args.out), indent=1))
        return 0

    from earm_jax.jobs.metadata import provenance, write_json

    started = time.perf_counter()
    rankings = {
        layers: compare_rankings(answers, args.reference, args.data, args.cache_dir)
        for layers, answers, _ in args.small
    }
    speed = time_models(
        {layers: folder for layers, _, folder in args.small},
        args.data,
        args.cache_dir,
        args.questions,
        args.rounds,
        args.backends.split(","),
    )
    result = {
        "experiment": "smaller_scorer",
        "summary": summary(rankings, speed),
        "rankings": rankings,
        "speed": speed,
        "seconds": time.perf_counter() - started,
        **provenance("python", ["experiments/smaller_scorer.py", *sys.argv[1:]]),
    }
    write_json(args.out, result)
    for layers, found in rankings.items():
        print(layers, json.dumps({k: found[k] for k in ("model", "blend")}))
    print(json.dumps(speed["models"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

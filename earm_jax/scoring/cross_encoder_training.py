r"""Fine-tuning a BERT-like folder into a relevance cross-encoder (host side).

The training signal is listwise: each *group* is one query with one relevant
memory and ``group_size - 1`` non-relevant memories from the same candidate
pool, and the loss is the softmax cross-entropy of the relevant one among them,

.. math::

   \ell = -\log \frac{e^{f(q, m^+)}}{\sum_{m \in \text{group}} e^{f(q, m)}} .

A pointwise loss on the hardest negatives alone teaches a model to separate
evidence from its closest look-alikes but not to place it above the rest of the
pool; so the negatives of a group mix ``hard_negatives`` drawn from the most
similar non-relevant candidates with uniform draws from the whole pool, and are
drawn afresh every time a group is used.

The logit's scale is arbitrary after a listwise loss. :func:`calibrate` fits
Platt scaling (:math:`\sigma(a\,f + b)`) on pools the model did not train on
and folds ``a`` and ``b`` into the classifier layer, so the saved folder's
sigmoid is a calibrated probability wherever it runs (sentence-transformers,
vLLM).

Needs torch and transformers (the ``embed`` extra).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .hardest_groups import hardest_groups
from .listwise_groups import (
    TrainingGroup,
    listwise_loss,
    sample_group,
    sample_group_indices,
)
from .platt import Calibration
from .token_batches import encode_pairs, longest_first_batches

Precision = Literal["auto", "float32", "bfloat16"]


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """What shapes the training (recorded in the scorer's manifest).

    Attributes:
      epochs: passes over the groups (fractions allowed).
      group_size: memories per group (one relevant, the rest negatives).
      hard_negatives: negatives per group from ``hard_negatives`` of the group;
        the rest of the group is drawn uniformly from ``other_negatives``.
      groups_per_step: groups per optimizer step.
      learning_rate: AdamW's peak learning rate (linear warm-up, linear decay).
      warmup_fraction: share of the steps spent warming up.
      weight_decay: AdamW's decoupled weight decay.
      max_length: tokens per pair (longest-first truncation).
      precision: ``"bfloat16"`` (autocast; about 1.5x faster on CPUs with native
        bfloat16, weights stay float32, but several times slower where bfloat16
        is emulated, e.g. AVX2-only CPUs), ``"float32"``, or ``"auto"``:
        bfloat16 where the CPU has it natively (:func:`resolve_precision`).
      max_steps: stop after this many steps (0: no cap): the time budget. At
        the default (500 steps of 64 pairs) one model trains in about 25-30
        minutes on 2 CPU cores with native bfloat16, whether it sees 4 or 7
        LoCoMo conversations; in float32 on AVX2-only cores a step takes
        about 7-8 s (500 steps: about an hour; 200: about 27 minutes).
      seed: torch and sampling seed.
      num_threads: torch CPU threads (``None``: torch's default).
      chunk_size: pairs per forward pass within a step; a step's pairs are
        sorted by length into chunks, so short pairs are not padded to the
        longest of the step (the loss is the same).
      freeze_word_embeddings: keep the vocabulary embeddings fixed (half of
        MiniLM's weights: a smaller optimizer step, and a few thousand questions
        cannot retrain a vocabulary anyway).
      layers: keep only the base model's first ``layers`` transformer layers
        (0: all of them). A pair's cost is nearly proportional to the layers:
        MiniLM cut to 2 of its 6 scores about 3x as fast, and ranks worse
        (docs/trained-scorer.md, "A smaller model", measures both).
      residual_weight: w >= 0; the loss ranks ``logit + w * cosine`` instead
        of the logit, so the network learns what the retriever's similarity
        misses (0: the logit alone). The similarity blend fitted after
        training puts the cosine back at whatever weight ranks best.
      hardest_share: in (0, 1]; after the first pass over every group, the
        remaining steps draw only from this share of the groups, those whose
        positive the model then ranks worst among their hard negatives
        (:func:`~earm_jax.scoring.hardest_groups.hardest_groups`); 1: every
        pass draws from all groups.
    """

    epochs: float = 2.0
    group_size: int = 16
    hard_negatives: int = 5
    groups_per_step: int = 4
    learning_rate: float = 4e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    max_length: int = 256
    precision: Precision = "auto"
    max_steps: int = 500
    seed: int = 0
    num_threads: int | None = None
    chunk_size: int = 16
    freeze_word_embeddings: bool = True
    layers: int = 0
    residual_weight: float = 0.0
    hardest_share: float = 1.0

    def __post_init__(self) -> None:
        def positive_int(name: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")

        positive_int("group_size")
        positive_int("groups_per_step")
        positive_int("max_length")
        positive_int("chunk_size")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2, got {self.group_size}")
        if not 0 <= self.hard_negatives <= self.group_size - 1:
            raise ValueError(
                f"hard_negatives must be in [0, group_size - 1], got "
                f"{self.hard_negatives}"
            )
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"epochs must be > 0, got {self.epochs}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(
                f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}"
            )
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.precision not in ("auto", "float32", "bfloat16"):
            raise ValueError(
                f"precision must be auto, float32 or bfloat16, got {self.precision!r}"
            )
        if isinstance(self.max_steps, bool) or self.max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {self.max_steps}")
        layers = self.layers
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 0:
            raise ValueError(f"layers must be an int >= 0, got {layers!r}")
        weight = self.residual_weight
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(f"residual_weight must be >= 0, got {weight!r}")
        share = self.hardest_share
        if not (math.isfinite(share) and 0 < share <= 1):
            raise ValueError(f"hardest_share must be in (0, 1], got {share!r}")

    def num_steps(self, num_groups: int) -> int:
        steps = max(1, math.ceil(self.epochs * num_groups / self.groups_per_step))
        return min(steps, self.max_steps) if self.max_steps else steps


@dataclasses.dataclass(frozen=True)
class TrainingReport:
    """What a training run did.

    Attributes:
      steps: optimizer steps taken.
      pairs: (query, memory) pairs seen, with repeats.
      seconds: wall time of the loop.
      first_loss: mean loss of the first 10% of steps.
      last_loss: mean loss of the last 10% of steps.
      focused_groups: how many groups the steps after the first pass drew
        from (0: no focus, every pass drew from all groups).
    """

    steps: int
    pairs: int
    seconds: float
    first_loss: float
    last_loss: float
    focused_groups: int = 0


StepCallback = Callable[[int, int, float], Any]
"""``(step done, total steps, loss)``: called after every step."""


def native_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX), read
    from ``cpuinfo`` (``False`` where it cannot be read)."""
    try:
        with open(cpuinfo, encoding="utf-8") as info:
            for line in info:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        return False
    return False


def resolve_precision(precision: Precision) -> Precision:
    """``"auto"`` becomes ``"bfloat16"`` on CPUs with native bfloat16 and
    ``"float32"`` elsewhere; other values are returned as they are."""
    if precision == "auto":
        return "bfloat16" if native_bfloat16() else "float32"
    return precision


def _autocast(precision: Precision) -> Any:
    import contextlib

    import torch

    if resolve_precision(precision) == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def load_base_model(
    folder: str | os.PathLike[str], layers: int = 0, seed: int | None = None
) -> tuple[Any, Any]:
    """``(tokenizer, one-label sequence-classification model)`` from a local
    BERT-like folder (a sentence-transformers folder works: its transformer
    weights are the encoder; the classification head starts fresh), cut to
    its first ``layers`` transformer layers (0: all; :func:`keep_layers`).
    ``seed`` seeds torch before the fresh head is drawn, so that one seed is
    one model (``None``: whatever state torch's generator is in).

    Raises:
      ValueError: naming ``layers`` when the model has fewer, or is not a
        model whose layers can be cut.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "classifier newly initialized" is expected
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(folder), num_labels=1, local_files_only=True
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    if layers:
        keep_layers(model, layers)
    return tokenizer, model


def base_model_layers(folder: str | os.PathLike[str]) -> int | None:
    """How many transformer layers the base model's ``config.json`` says it
    has (``None``: it does not say, or cannot be read here), so that
    ``layers`` is checked before a build loads anything."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    layers = config.get("num_hidden_layers") if isinstance(config, dict) else None
    return layers if isinstance(layers, int) else None


def keep_layers(model: Any, layers: int) -> None:
    """Cuts a BERT-like model to its embeddings, its first ``layers``
    transformer layers and its head, in place. Keeping the lower layers is
    the usual way to shrink a pretrained encoder before fine-tuning; the
    config says how many are left, so the saved folder loads as it is."""
    encoder = getattr(getattr(model, "base_model", None), "encoder", None)
    stack = getattr(encoder, "layer", None)
    if stack is None:
        raise ValueError(
            f"layers: cannot cut a {type(model).__name__} (no encoder.layer stack)"
        )
    if not 1 <= layers <= len(stack):
        raise ValueError(
            f"layers must be between 1 and the base model's {len(stack)}, got {layers}"
        )
    del stack[layers:]
    model.config.num_hidden_layers = layers


def _chunked_logits(
    tokenizer: Any,
    model: Any,
    queries: list[str],
    memories: list[str],
    settings: TrainingSettings,
) -> Any:
    """The step's logits in input order, computed on length-sorted chunks."""
    import torch

    encoded = tokenizer(
        queries,
        memories,
        truncation="longest_first",
        max_length=settings.max_length,
    )
    lengths = [len(ids) for ids in encoded["input_ids"]]
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    parts = []
    for start in range(0, len(order), settings.chunk_size):
        chosen = order[start : start + settings.chunk_size]
        features = tokenizer.pad(
            {name: [encoded[name][i] for i in chosen] for name in encoded},
            return_tensors="pt",
        )
        with _autocast(settings.precision):
            parts.append(model(**features).logits.squeeze(-1).float())
    logits = torch.cat(parts)
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return logits[inverse]


def train_cross_encoder(
    tokenizer: Any,
    model: Any,
    groups: Sequence[TrainingGroup],
    settings: TrainingSettings,
    on_step: StepCallback | None = None,
) -> TrainingReport:
    """Trains ``model`` in place on ``groups`` with the listwise loss.

    Args:
      tokenizer: the model's tokenizer.
      model: a one-label sequence-classification model (``load_base_model``).
      groups: the training groups (at least one).
      settings: see :class:`TrainingSettings`.
      on_step: progress callback.

    Raises:
      ValueError: no groups.
    """
    import torch

    if not groups:
        raise ValueError("no training groups: no question has a relevant memory")
    if settings.residual_weight and not all(g.similarities for g in groups):
        raise ValueError(
            "residual_weight needs every group's similarities (the cosines of "
            "its memories)"
        )
    if settings.num_threads is not None:
        torch.set_num_threads(settings.num_threads)
    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    steps = settings.num_steps(len(groups))
    warmup = max(1, round(settings.warmup_fraction * steps))
    if settings.freeze_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    optimizer = torch.optim.AdamW(
        [parameter for parameter in model.parameters() if parameter.requires_grad],
        lr=settings.learning_rate,
        weight_decay=settings.weight_decay,
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: min(1.0, (step + 1) / warmup) * max(0.0, (steps - step) / steps),
    )
    model.train()
    drawn_from = np.arange(len(groups))
    focus_at = math.ceil(len(groups) / settings.groups_per_step)
    focused = settings.hardest_share < 1 and focus_at < steps
    order: list[int] = []
    losses: list[float] = []
    pairs = 0
    start = time.perf_counter()
    for step in range(steps):
        if focused and step == focus_at:
            drawn_from = hardest_groups(
                lambda pairs: model_logits(
                    tokenizer,
                    model,
                    pairs,
                    max_length=settings.max_length,
                    precision=settings.precision,
                ),
                groups,
                settings.hardest_share,
                settings.residual_weight,
            )
            model.train()
            order = []
        batch_groups = []
        offsets = []
        for _ in range(settings.groups_per_step):
            if not order:
                order = [int(drawn_from[i]) for i in rng.permutation(len(drawn_from))]
            group = groups[order.pop()]
            chosen = sample_group_indices(group, settings, rng)
            batch_groups.append((group.query, [group.memories[i] for i in chosen]))
            if settings.residual_weight:
                offsets.extend(group.similarities[i] for i in chosen)
        queries = [query for query, memories in batch_groups for _ in memories]
        memories = [
            memory for _, group_memories in batch_groups for memory in group_memories
        ]
        features = tokenizer(
            queries,
            memories,
            padding=True,
            truncation="longest_first",
            max_length=settings.max_length,
            return_tensors="pt",
        )
        with _autocast(settings.precision):
            logits = model(**features).logits.squeeze(-1).float()
        loss = listwise_loss(
            logits,
            [len(group_memories) for _, group_memories in batch_groups],
            settings.residual_weight * torch.tensor(offsets, dtype=logits.dtype)
            if settings.residual_weight
            else None,
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        pairs += len(memories)
        if on_step is not None:
            on_step(step + 1, steps, losses[-1])
    model.eval()
    tenth = max(1, len(losses) // 10)
    return TrainingReport(
        steps=steps,
        pairs=pairs,
        seconds=time.perf_counter() - start,
        first_loss=float(np.mean(losses[:tenth])),
        last_loss=float(np.mean(losses[-tenth:])),
        focused_groups=len(drawn_from) if focused else 0,
    )


def model_logits(
    tokenizer: Any,
    model: Any,
    pairs: Sequence[tuple[str, str]],
    *,
    max_length: int = 256,
    batch_size: int = 128,
    precision: Precision = "float32",
) -> np.ndarray:
    """``float32[len(pairs)]`` logits of a model being trained (batches
    sorted by token count, no gradient)."""
    import torch

    out = np.zeros(len(pairs), np.float32)
    if not pairs:
        return out
    encoded = encode_pairs(tokenizer, pairs, max_length)
    lengths = [len(ids) for ids in encoded["input_ids"]]
    model.eval()
    with torch.inference_mode(), _autocast(precision):
        for chosen in longest_first_batches(lengths, batch_size):
            features = tokenizer.pad(
                {name: [encoded[name][i] for i in chosen] for name in encoded},
                return_tensors="pt",
            )
            out[chosen] = model(**features).logits.squeeze(-1).float().numpy()
    return out


def apply_calibration(model: Any, calibration: Calibration) -> None:
    """Folds Platt scaling into the model's last linear layer (in place), so
    its sigmoid is the calibrated probability."""
    import torch

    classifier = model.classifier
    if not isinstance(classifier, torch.nn.Linear) or classifier.out_features != 1:
        raise ValueError("the model's classifier is not a one-output linear layer")
    with torch.no_grad():
        classifier.weight.mul_(calibration.scale)
        classifier.bias.mul_(calibration.scale).add_(calibration.shift)


def save_model(
    tokenizer: Any, model: Any, folder: str | os.PathLike[str], max_length: int
) -> Path:
    """Writes a folder that ``sentence_transformers.CrossEncoder`` and vLLM's
    pooling runner both load (weights as safetensors, the tokenizer, and
    ``model_max_length`` set to the training length)."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    # No problem_type: vLLM serves a one-label model's score as sigmoid(logit)
    # unless told it is a regression (then the raw logit).
    model.save_pretrained(str(path), safe_serialization=True)
    tokenizer.model_max_length = max_length
    tokenizer.save_pretrained(str(path))
    return path


__all__ = [
    "TrainingGroup",
    "TrainingReport",
    "TrainingSettings",
    "apply_calibration",
    "base_model_layers",
    "keep_layers",
    "listwise_loss",
    "load_base_model",
    "model_logits",
    "sample_group",
    "sample_group_indices",
    "save_model",
    "train_cross_encoder",
]

"""A cross-encoder folder run by ONNX Runtime: the export, its cache, the session.

The folder is exported once (``torch.onnx.export``, the dynamo exporter, with
a dynamic batch and sequence length) and, for ``int8``, its weights quantized
dynamically (``onnxruntime.quantization.quantize_dynamic``). The export is
cached under the user's cache folder (``$EARM_CACHE_DIR/onnx``), keyed by the
folder's identity (a digest of its files), the precision and the export's
version: never inside the folder, whose files define its identity (and so the
score cache's keys). A folder whose weights change gets a new export.

The session runs with every graph optimization on (ORT fuses BERT's attention,
GELU and layer norms), sequentially (one inter-op thread: a small model on a
few cores gains nothing from running operators side by side) and with
``num_threads`` intra-op threads (default: ORT's, one per physical core).
Pairs are tokenized once, sorted by token count and batched, as the torch
path does (:mod:`earm_jax.scoring.token_batches`), so a batch pads to its own
longest pair.

Needs the ``scorer`` extra (onnxruntime, onnx, onnxscript) and the ``embed``
extra (torch and transformers for the export); nothing here is imported by
``import earm_jax``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from earm_jax.store.embeddings import default_cache_dir, model_identity

from .token_batches import encode_pairs, longest_first_batches

Precision = Literal["float32", "int8"]
PRECISIONS: tuple[str, ...] = ("float32", "int8")
EXPORT_VERSION = "onnx-export-v1"
"""Bumped when the export or the quantization changes (a new cache entry)."""

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
MODEL_FILE = "model.onnx"


def export_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where exports are kept: ``cache_dir/onnx`` (default: the user's cache)."""
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / "onnx"


def export_path(
    folder: str | os.PathLike[str],
    precision: Precision,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The cached ONNX file of ``folder`` at ``precision`` (it may not exist yet)."""
    identity = model_identity(folder)
    key = hashlib.sha256(
        f"{identity}|{precision}|{EXPORT_VERSION}".encode()
    ).hexdigest()
    return (
        export_cache_dir(cache_dir) / f"{identity}-{precision}-{key[:12]}" / MODEL_FILE
    )


@contextlib.contextmanager
def _quiet_loggers(*names: str) -> Iterator[None]:
    loggers = [
        logging.getLogger(name) if name else logging.getLogger() for name in names
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _export_float32(folder: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        str(folder), local_files_only=True
    ).eval()
    example = tokenizer(
        ["a question", "another question"],
        ["a memory", "a longer memory of several words"],
        return_tensors="pt",
        padding=True,
    )
    names = [name for name in INPUT_NAMES if name in example]
    if names[:2] != ["input_ids", "attention_mask"]:
        raise ValueError(f"{str(folder)!r}: a tokenizer without input_ids and mask")

    class Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(
            self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None
        ) -> Any:
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, **extra
            ).logits

    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence", max=512)
    # The exporter prints its phases, logs the operators it skips and warns
    # about names it renames: a one-time build step, kept quiet.
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        _quiet_loggers("torch", "onnxscript"),
        torch.inference_mode(False),
    ):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            Logits(model),
            tuple(example[name] for name in names),
            input_names=names,
            output_names=["logits"],
            dynamic_shapes={name: {0: batch, 1: sequence} for name in names},
            dynamo=True,
            external_data=False,
            verbose=False,
        )
        program.save(str(out), external_data=False)


def _quantize_int8(source: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # It logs advice on the root logger ("consider pre-processing").
    with warnings.catch_warnings(), _quiet_loggers(""):
        warnings.simplefilter("ignore")
        quantize_dynamic(str(source), str(out), weight_type=QuantType.QInt8)


def build_export(
    folder: str | os.PathLike[str],
    precision: Precision = "float32",
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The ONNX file of ``folder`` at ``precision``, exported on first use.

    Written to a temporary file beside its place and renamed, so a stopped
    export or two processes exporting at once never leave a half file.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    target = export_path(folder, precision, cache_dir)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        scratch_dir = Path(scratch)
        if precision == "float32":
            _export_float32(Path(folder), scratch_dir / MODEL_FILE)
        else:
            source = build_export(folder, "float32", cache_dir)
            _quantize_int8(source, scratch_dir / MODEL_FILE)
        os.replace(scratch_dir / MODEL_FILE, target)
    return target


def remove_exports(cache_dir: str | os.PathLike[str] | None = None) -> None:
    """Deletes every cached export (they are rebuilt on use)."""
    shutil.rmtree(export_cache_dir(cache_dir), ignore_errors=True)


class OnnxCrossEncoder:
    """One exported cross-encoder in an ONNX Runtime session.

    Args:
      folder: the model folder (its tokenizer is read from it).
      precision: ``"float32"`` or ``"int8"`` (dynamically quantized weights).
      max_length: tokens per pair (longest first truncation).
      num_threads: intra-op threads (``None``: ORT's default).
      cache_dir: the cache the export goes under (default: the user's).
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        precision: Precision = "float32",
        max_length: int = 256,
        num_threads: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        import onnxruntime as ort
        from transformers import AutoTokenizer

        self.path = build_export(folder, precision, cache_dir)
        self.max_length = max_length
        self.tokenizer = AutoTokenizer.from_pretrained(
            str(folder), local_files_only=True
        )
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        if num_threads is not None:
            options.intra_op_num_threads = num_threads
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(self.path), options, providers=["CPUExecutionProvider"]
        )
        self.input_names = [item.name for item in self.session.get_inputs()]
        pad = self.tokenizer.pad_token_id
        self.pad_values = {"input_ids": 0 if pad is None else int(pad)}

    def logits(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> np.ndarray:
        """``float32[len(pairs)]`` raw logits, in the order of ``pairs``."""
        if not pairs:
            return np.zeros(0, np.float32)
        encoded = encode_pairs(self.tokenizer, pairs, self.max_length)
        lengths = np.array([len(ids) for ids in encoded["input_ids"]])
        out = np.empty(len(pairs), np.float32)
        for rows in longest_first_batches(lengths, batch_size):
            width = int(lengths[rows].max())
            feed = {}
            for name in self.input_names:
                array = np.full(
                    (len(rows), width), self.pad_values.get(name, 0), np.int64
                )
                for i, row in enumerate(rows):
                    values = encoded[name][row]
                    array[i, : len(values)] = values
                feed[name] = array
            (logits,) = self.session.run(["logits"], feed)
            out[rows] = logits.reshape(len(rows), -1)[:, 0]
        return out


__all__ = [
    "EXPORT_VERSION",
    "PRECISIONS",
    "OnnxCrossEncoder",
    "build_export",
    "export_cache_dir",
    "export_path",
    "remove_exports",
]

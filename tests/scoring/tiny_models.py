"""Builds tiny random-weight models locally, for real-server protocol tests.

* a causal LM (Llama architecture, 2 layers) with a byte-level BPE tokenizer
  trained here, in which " yes", " no", "yes" and "no" are single tokens, and a
  ChatML chat template;
* a one-label cross-encoder (BERT, 2 layers) with a WordPiece tokenizer trained
  here.

Random weights: the scores are real vLLM computations (protocol, batching,
normalisation, agreement with transformers) but carry no relevance meaning.
Nothing is downloaded. Run as a script to build into a folder:
``python tests/scoring/tiny_models.py OUT_DIR``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from filelock import FileLock

BUILDER_VERSION = "tiny-v2"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_WORDS = (
    "the a memory question answer evidence relevant does contain yes no who what "
    "when where why how did went bought said likes loves visited met friend sister "
    "brother mother father dog cat park city trip book movie music job school "
    "monday tuesday summer winter birthday party dinner coffee beach mountain "
    "painting guitar running yoga camping Caroline Melanie John Maria Alice Bob"
).split()


def _corpus(num_lines: int = 3000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(num_lines):
        words = rng.choices(_WORDS, k=rng.randint(5, 14))
        answer = rng.choice(["yes", "no", "Yes", "No"])
        lines.append(f"Question: {' '.join(words)}? Answer: {answer}")
        lines.append(f"{answer} {' '.join(words)} 0.{rng.randint(0, 9)}")
    return lines


def build_causal_lm(out_dir: Path, seed: int = 0) -> Path:
    """Tiny Llama with a locally trained byte-level BPE tokenizer."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir.mkdir(parents=True, exist_ok=True)
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    for text in (" yes", " no", "yes", "no"):
        ids = tokenizer.encode(text).ids
        if len(ids) != 1:
            raise RuntimeError(f"{text!r} is not a single token: {ids}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(out_dir)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=512,
        bos_token_id=None,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    # Wider random output weights spread P(yes)/(P(yes)+P(no)) over roughly
    # 0.05-0.95, so the comparison with transformers is not trivially near 0.5.
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 0.1)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def build_cross_encoder(out_dir: Path, seed: int = 0) -> Path:
    """Tiny one-label BERT cross-encoder with a locally trained WordPiece."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from tokenizers.processors import TemplateProcessing
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertTokenizerFast,
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=2000, special_tokens=special)
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    fast = BertTokenizerFast(tokenizer_object=tokenizer)
    fast.save_pretrained(out_dir)

    torch.manual_seed(seed + 1)
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=512,
        num_labels=1,
    )
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def write_scorer_build(
    root: Path, model: Path | None, full: float, semantic: float
) -> Path:
    """A trained-scorer folder (``earm train-scorer``'s layout, one fold)
    whose manifest records cross-fitted Full and Semantic Recall@10 of
    ``full`` and ``semantic``; the fold is a copy of ``model`` (``None``: a
    stub ``config.json``, for checks that never load it). Returns the fold's
    folder, the one ``earm mcp --scorer-model`` takes."""
    import shutil

    fold = root / "fold-0"
    if model is None:
        fold.mkdir(parents=True)
        (fold / "config.json").write_text("{}")
    else:
        shutil.copytree(model, fold)
    recall = {"full": full, "semantic": semantic, "oracle": 1.0}
    manifest = {
        "format": "earm-trained-scorer-v1",
        "folds": [
            {"name": "fold-0", "folder": "fold-0", "trained_on": [], "held_out": []}
        ],
        "cross_fitted_quality": {"turns": {"recall@10": recall}},
        "profiles": {},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return fold


def build_all(root: Path) -> dict[str, Path]:
    """Builds both models under ``root/BUILDER_VERSION`` once (reused after)."""
    folder = root / BUILDER_VERSION
    marker = folder / "built.json"
    paths = {"llm": folder / "llm", "cross_encoder": folder / "cross_encoder"}
    folder.mkdir(parents=True, exist_ok=True)
    # pytest-xdist workers (and concurrent runs) build it once between them.
    with FileLock(str(folder) + ".lock"):
        if not marker.exists():
            build_causal_lm(paths["llm"])
            build_cross_encoder(paths["cross_encoder"])
            marker.write_text(json.dumps({"builder": BUILDER_VERSION}))
    return paths


if __name__ == "__main__":
    print(build_all(Path(sys.argv[1])))

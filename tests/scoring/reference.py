"""Direct transformers computations of the scores vLLM serves (the oracle)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path


def yes_probability_from_logits(logits, yes_id: int, no_id: int) -> float:
    """P(yes) / (P(yes) + P(no)) from next-token logits (float64 math)."""
    difference = float(logits[yes_id]) - float(logits[no_id])
    return 1.0 / (1.0 + math.exp(-difference))


class CausalLmReference:
    """Next-token P(yes)/(P(yes)+P(no)) with transformers on the same weights."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32
        ).eval()

    def token_id(self, text: str) -> int:
        (token,) = self.tokenizer.encode(text, add_special_tokens=False)
        return token

    def _last_logits(self, token_ids: Sequence[int]):
        with self._torch.no_grad():
            inputs = self._torch.tensor([list(token_ids)])
            return self.model(input_ids=inputs).logits[0, -1].double()

    def completion_yes(self, prompt: str, yes: str, no: str) -> float:
        ids = self.tokenizer.encode(prompt, add_special_tokens=True)
        logits = self._last_logits(ids)
        return yes_probability_from_logits(
            logits, self.token_id(yes), self.token_id(no)
        )

    def chat_yes(self, messages: list[dict[str, str]], yes: str, no: str) -> float:
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        logits = self._last_logits(ids)
        return yes_probability_from_logits(
            logits, self.token_id(yes), self.token_id(no)
        )


class CrossEncoderReference:
    """sigmoid(logit) of a one-label cross-encoder with transformers."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            model_dir, dtype=torch.float32
        ).eval()

    def score(self, query: str, memory: str) -> float:
        inputs = self.tokenizer(query, memory, return_tensors="pt")
        with self._torch.no_grad():
            logit = float(self.model(**inputs).logits[0, 0])
        return 1.0 / (1.0 + math.exp(-logit))

"""Prompt layout (instruction, query, then memory last) and text-score parsing."""

import math

import pytest

from earm_jax.scoring import prompts

QUERY = "When did Caroline go to the park?"
MEMORY = "Caroline: I went to the park on Monday."


@pytest.mark.parametrize("render", [prompts.yesno_prompt, prompts.text_prompt])
def test_completion_prompts_put_instruction_and_query_before_memory(render):
    text = render(QUERY, MEMORY)
    assert text.index(prompts.RELEVANCE_INSTRUCTION) < text.index(QUERY)
    assert text.index(QUERY) < text.index(MEMORY)


@pytest.mark.parametrize("render", [prompts.yesno_prompt, prompts.text_prompt])
def test_anchors_of_one_query_share_the_prefix_up_to_the_memory(render):
    first = render(QUERY, "memory one")
    second = render(QUERY, "another memory")
    prefix_length = first.index("memory one")
    assert second[:prefix_length] == first[:prefix_length]
    assert QUERY in first[:prefix_length]


def test_chat_messages_put_the_memory_last():
    messages = prompts.chat_messages(QUERY, MEMORY)
    assert messages[0]["role"] == "system"
    user = messages[-1]["content"]
    assert user.index(QUERY) < user.index(MEMORY)


def test_prompt_versions_are_distinct():
    versions = {
        prompts.YESNO_PROMPT_VERSION,
        prompts.CHAT_PROMPT_VERSION,
        prompts.TEXT_PROMPT_VERSION,
        prompts.RERANK_PROMPT_VERSION,
    }
    assert len(versions) == 4


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("0.7", 0.7),
        (" 0.25\n", 0.25),
        ("Relevance: 1", 1.0),
        ("0", 0.0),
        (".5 because", 0.5),
        ("1.0.", 1.0),
        ("score 3e-1", 0.3),
    ],
)
def test_parse_text_score_accepts_numbers_in_unit_interval(reply, expected):
    assert math.isclose(prompts.parse_text_score(reply), expected)


@pytest.mark.parametrize("reply", ["", "yes", "relevant!", "1.5", "-0.2", "10", "nan"])
def test_parse_text_score_rejects_everything_else(reply):
    with pytest.raises(ValueError):
        prompts.parse_text_score(reply)

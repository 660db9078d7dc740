"""Tests of the relevance scorers (unit, fault injection, real vLLM)."""

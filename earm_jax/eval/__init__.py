"""Evaluation, pure and I/O-free: synthetic streams, the seven-policy
comparison, ranking metrics, bootstrap statistics and result summaries."""

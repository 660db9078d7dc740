"""What was measured and rejected, kept to rerun its measurements.

The solver (``earm_jax.core``), the policies and the package root never import
this folder (``tests/test_layers.py`` checks it): their traced path holds only
what ships, and a variant here builds on their public pieces instead of a
branch inside them. The evaluation imports search expansion only when asked
for it (``expand > 0``, ``earm simulate/locomo --expand``). Each module's
docstring gives the measurement that rejected it (docs/design-notes.md, "What
moved out of the core").

* :mod:`~earm_jax.contrib.stop_rules`: the adaptive policy's rejected stop
  rules, with the price pacing only they read.
* :mod:`~earm_jax.contrib.similarity_covariate`: the similarity covariate of
  the fold-in, a fold-in passed to the solver.
* :mod:`~earm_jax.contrib.expand`: search expansion (completions of memories
  outside the pool).
"""

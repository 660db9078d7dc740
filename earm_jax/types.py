"""Array type aliases and the dimension names used in shape annotations.

The public pytrees carry jaxtyping annotations (``Float[Array, "M R"]``:
annotations only, never checked at run time). Dimension names used there and
throughout the docstrings:

* ``M`` -- ``num_memories``: rows of the experience matrix (one per memory, for life).
* ``Q`` -- ``capacity``: query slots in the history buffer (one per query).
* ``N`` -- ``pool_size``: candidates retrieved per query.
* ``K`` -- ``max_budget``: width of one stored history row (anchors per query).
* ``R`` -- ``rank``: latent dimension of the low-rank term.
* ``S`` -- streams run in parallel (``vmap``); ``T`` -- queries in a stream.
* ``D`` -- width of the optional memory and query embeddings.
"""

from __future__ import annotations

import jax
from jax.typing import ArrayLike

Array = jax.Array
PRNGKey = jax.Array

__all__ = ["Array", "ArrayLike", "PRNGKey"]

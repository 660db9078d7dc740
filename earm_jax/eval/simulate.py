r"""Synthetic query streams for the batched simulation study (docs/simulation.md).

Each stream is one agent's life: memories arrive over time, queries follow,
each query draws an *information need* that may recur, the retriever returns a
pool of ``N`` candidates by a noisy similarity, and the scorer (the stand-in for
the LLM) answers the true relevance with noise and miscalibration.

The generative model, per stream (all draws from the stream's own key):

1. **Latent geometry.** Memory factors :math:`u_m \sim \mathcal N(0, I)` and one
   need factor :math:`w_j \sim \mathcal N(0, I)` per need slot ``j < T``, both in
   ``latent_dim`` dimensions of which only the first ``true_rank`` are used.
2. **Needs.** Query ``t`` asks a new need (slot ``t``) with probability
   ``1 - recurrence`` and otherwise repeats the need of a uniformly chosen
   earlier query (query 0 always asks a new one). Its factor is
   :math:`v_t = \mathrm{normalize}(w_{\mathrm{need}(t)} + \text{need\_jitter}\,
   \varepsilon_t)`, so a repeated need is similar, not identical.
3. **True relevance** (graded, in [0, 1]). The logit :math:`z_{m,t} = u_m \cdot
   v_t` is standardized over the ``M`` memories of query ``t`` to
   :math:`\tilde z_{m,t}`; the threshold :math:`\theta_t` sits midway between the
   ``relevant_per_query``-th and the next largest :math:`\tilde z_{\cdot,t}`, and
   :math:`\mathrm{truth}_{m,t} = \sigma(\text{relevance\_sharpness}\,(\tilde
   z_{m,t} - \theta_t))`. ``relevant = truth > 0.5``, i.e. exactly
   ``relevant_per_query`` memories per query among all ``M``; only inserted ones
   count (``num_relevant``). The logits are rank ``true_rank`` plus a per-query
   offset: the structure the solver's :math:`\mu + b_m + c_t + u_m\cdot v_t`
   model can learn.
4. **Arrivals.** The first ``round(initial_fraction * M)`` memories exist from
   query 0; the rest arrive evenly spread over queries ``1 .. T-1`` in id order
   (``insert_time``). A memory is a candidate only for queries
   ``t >= insert_time``.
5. **Similarity** (unitless, higher = more similar): :math:`s_{m,t} = \tilde
   z_{m,t} + \text{similarity\_noise}\,\eta_{m,t}`, except that a relevant
   (memory, need) pair is "semantically distant" with probability
   ``semantic_gap`` (drawn once per pair, so the gap persists when the need
   recurs); its :math:`\tilde z` is then replaced by ``gap_level``, the look of a
   loosely related, irrelevant memory.
6. **Pool.** The top ``N`` inserted memories by similarity, in descending
   similarity order. When fewer than ``N`` memories are inserted the tail is
   padding: ``valid = False``, ``candidates = 0``, ``similarity = -inf``,
   ``scores = 0``, ``relevant = False``.
7. **Scorer answers.** :math:`y = \mathrm{clip}(\mathrm{truth}^{\gamma} +
   \text{scorer\_noise}\,\xi, 0, 1)` with :math:`\gamma` = ``scorer_exponent``
   (a monotone miscalibration), then with probability ``wrong_rate`` the answer
   is confidently wrong: :math:`1 - y`.
8. **Side information** (only with ``SimConfig.embedding_dim = D > 0``): unit
   embeddings of every memory and query, as a text encoder would give them.
   The first ``latent_dim`` dimensions hold the factors scaled by a fixed
   random :math:`s_d` (so the cosine of two embeddings weighs the relevance
   dimensions unevenly and a learned diagonal metric recovers the logit), mixed
   with independent noise in every dimension; ``side_information`` sets the
   share of signal.

Knobs (:class:`SimKnobs`; each may differ per stream without recompiling):

======================  =======  ==============================================
knob                    default  what it models
======================  =======  ==============================================
``recurrence``          0.5      probability a query repeats an earlier need:
                                 how much past experience is directly reusable
``true_rank``           8        rank of the true relevance logits (clipped to
                                 ``[1, latent_dim]``); low = needs share their
                                 relevant memories, high = needs independent
``need_jitter``         0.3      how much a repeated need's query differs from
                                 its first asking (0 = identical relevance)
``relevant_per_query``  4        relevant memories per query among all ``M``
                                 (clipped to ``[1, N - 1]``); inserted ones count
``relevance_sharpness`` 4.0      slope of the graded truth around the threshold
                                 (large = almost binary, small = many borderline
                                 memories with truth near 0.5)
``initial_fraction``    0.5      fraction of memories present before query 0;
                                 the rest arrive evenly over the stream
``semantic_gap``        0.3      probability a relevant (memory, need) pair looks
                                 semantically distant (similarity of an
                                 irrelevant memory): the retriever's blind spot
``gap_level``           1.5      standardized similarity signal such a pair gets
                                 (1.5 = a loosely related memory: often still in
                                 the pool, rarely near its top)
``similarity_noise``    0.6      std of the per-query similarity noise, in units
                                 of the similarity signal's spread over memories
``scorer_noise``        0.1      std of the scorer's additive noise
``scorer_exponent``     1.0      power applied to the truth before the noise: 1 is
                                 calibrated, < 1 over-generous, > 1 stingy
                                 (monotone: the noise-free ranking is unchanged)
``wrong_rate``          0.02     probability an answer is confidently wrong
                                 (``1 - y``), e.g. a misread memory
``side_information``    0.7      share of the embeddings that is signal (step 8;
                                 0 = the texts say nothing about relevance)
======================  =======  ==============================================

At the defaults (``SimConfig()``, 16 streams, key 0) the pool holds 0.90 of the
inserted relevant memories, and Recall@10 is 0.48 by similarity and 0.85 by the
scorer's answers (Full): close to LoCoMo turns with MiniLM (0.89 / 0.44 / 0.89,
docs/locomo.md). Recall@10 by similarity falls with ``semantic_gap``: 0.64 (gap
0.0), 0.48 (0.3), 0.30 (0.6), 0.09 (0.9).

Example:
  >>> import jax
  >>> from earm_jax.eval.simulate import SimConfig, SimKnobs, make_streams
  >>> config = SimConfig(num_memories=300, num_queries=20, pool_size=50)
  >>> build = jax.jit(make_streams, static_argnums=(1, 2))
  >>> streams = build(jax.random.key(0), config, 4)
  >>> streams.scores.shape
  (4, 20, 50)
  >>> knobs = SimKnobs(semantic_gap=jax.numpy.array([0.0, 0.2, 0.4, 0.6]))
  >>> build(jax.random.key(0), config, 4, knobs).relevant.shape
  (4, 20, 50)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.base import Query, Stream
from earm_jax.eval.scorer_profile import ScorerProfile, profile_answers
from earm_jax.types import Array, ArrayLike, PRNGKey


class SimConfig(NamedTuple):
    """Static shapes of a simulated stream (Python ints; hashable, never traced).

    Changing any field recompiles. Pass as a static argument when jitting:
    ``jax.jit(make_streams, static_argnums=(1, 2))``.

    Attributes:
      num_memories: ``M``, memories over the whole stream (inserted or not yet).
      num_queries: ``T``, queries per stream.
      pool_size: ``N``, candidates retrieved per query (``N <= M``).
      latent_dim: the largest ``true_rank`` a knob may ask for (the factor width).
      embedding_dim: ``D`` of the text-like side information (step 8); 0: the
        streams carry no embeddings.
    """

    num_memories: int = 2000
    num_queries: int = 100
    pool_size: int = 200
    latent_dim: int = 16
    embedding_dim: int = 0


class SimKnobs(NamedTuple):
    """Traced simulation knobs: scalars, or arrays with a leading ``S`` axis.

    A scalar applies to every stream; an array of shape ``(S,)`` gives each
    stream its own value. Changing values does not recompile. See the module
    docstring for the table of what each knob models.
    """

    recurrence: ArrayLike = 0.5
    true_rank: ArrayLike = 8
    need_jitter: ArrayLike = 0.3
    relevant_per_query: ArrayLike = 4
    relevance_sharpness: ArrayLike = 4.0
    initial_fraction: ArrayLike = 0.5
    semantic_gap: ArrayLike = 0.3
    gap_level: ArrayLike = 1.5
    similarity_noise: ArrayLike = 0.6
    scorer_noise: ArrayLike = 0.1
    scorer_exponent: ArrayLike = 1.0
    wrong_rate: ArrayLike = 0.02
    side_information: ArrayLike = 0.7


_INT_KNOBS = frozenset({"true_rank", "relevant_per_query"})


class SimDetails(NamedTuple):
    """Ground truth the scorer and retriever never show (for analysis and tests).

    Attributes:
      need: ``int32[T]`` need slot of each query (the index of the query that
        first asked it).
      is_repeat: ``bool[T]`` whether the query repeats an earlier need.
      truth: ``float32[T, N]`` graded true relevance of each pool candidate
        (0 at padding).
      pool_recall: ``float32[T]`` fraction of the inserted relevant memories that
        made the pool (0 where there are none).
    """

    need: Array
    is_repeat: Array
    truth: Array
    pool_recall: Array


def _validate(config: SimConfig) -> None:
    if config.num_memories < 1 or config.num_queries < 1 or config.latent_dim < 1:
        raise ValueError(f"SimConfig sizes must be positive, got {config}")
    if config.embedding_dim < 0 or (0 < config.embedding_dim < config.latent_dim):
        raise ValueError(
            "embedding_dim must be 0 (none) or at least latent_dim "
            f"({config.latent_dim}), got {config.embedding_dim}"
        )
    if not 2 <= config.pool_size <= config.num_memories:
        raise ValueError(
            f"pool_size must be in [2, num_memories], got {config.pool_size} "
            f"with num_memories={config.num_memories}"
        )


def _broadcast_knobs(knobs: SimKnobs, num_streams: int) -> SimKnobs:
    """Casts every knob to its dtype and broadcasts it to shape ``(S,)``."""
    leaves = {}
    for name, value in knobs._asdict().items():
        dtype = jnp.int32 if name in _INT_KNOBS else jnp.float32
        array = jnp.asarray(value, dtype=dtype)
        if array.ndim == 0:
            array = jnp.broadcast_to(array, (num_streams,))
        elif array.shape != (num_streams,):
            raise ValueError(
                f"knob {name} must be a scalar or have shape ({num_streams},), "
                f"got {array.shape}"
            )
        leaves[name] = array
    return SimKnobs(**leaves)


def _resolve_needs(is_new: Array, parent: Array) -> Array:
    """Follows ``parent`` pointers to the query that first asked each need.

    Pointer jumping: ``ceil(log2 T) + 1`` rounds of ``p = p[p]`` reach the root
    of every chain (chains only point backwards, so they are at most ``T`` long).
    """
    num_queries = is_new.shape[0]
    pointer = jnp.where(is_new, jnp.arange(num_queries, dtype=jnp.int32), parent)
    num_rounds = max(1, math.ceil(math.log2(max(num_queries, 2)))) + 1
    return jax.lax.fori_loop(0, num_rounds, lambda _, p: p[p], pointer)


def _split_draws(sampler, key: PRNGKey, **shapes: tuple[int, ...]) -> dict:
    """One ``sampler(key, (total,))`` call cut into arrays of the given shapes.

    A single call per distribution keeps compile time low (each PRNG call is
    compiled separately and costs about half a second on CPU).
    """
    sizes = [math.prod(shape) for shape in shapes.values()]
    flat = sampler(key, (sum(sizes),))
    draws, start = {}, 0
    for (name, shape), size in zip(shapes.items(), sizes, strict=True):
        draws[name] = flat[start : start + size].reshape(shape)
        start += size
    return draws


def _make_stream(
    key: PRNGKey,
    config: SimConfig,
    knobs: SimKnobs,
    profile: ScorerProfile | None = None,
) -> tuple[Stream, SimDetails]:
    """One stream; every knob leaf is a scalar here (``vmap`` adds the ``S`` axis)."""
    profile_key = jax.random.fold_in(key, 7)
    num_memories, num_queries = config.num_memories, config.num_queries
    pool_size, latent_dim = config.pool_size, config.latent_dim
    normal_key, uniform_key = jax.random.split(key)
    normal = _split_draws(
        jax.random.normal,
        normal_key,
        memory_factors=(num_memories, latent_dim),
        need_factors=(num_queries, latent_dim),
        jitter=(num_queries, latent_dim),
        similarity_noise=(num_queries, num_memories),
        scorer_noise=(num_queries, pool_size),
    )
    uniform = _split_draws(
        jax.random.uniform,
        uniform_key,
        recurrence=(num_queries,),
        parent=(num_queries,),
        gap=(num_queries, num_memories),
        wrong=(num_queries, pool_size),
    )
    query_index = jnp.arange(num_queries, dtype=jnp.int32)

    # 1. Latent geometry, restricted to the first true_rank dimensions.
    true_rank = jnp.clip(knobs.true_rank, 1, latent_dim)
    active = (jnp.arange(latent_dim) < true_rank)[None, :]  # [1, D]
    memory_factors = normal["memory_factors"]
    memory_factors = jnp.where(active, memory_factors, 0.0)
    need_factors = normal["need_factors"]

    # 2. Needs: new with probability 1 - recurrence, else a uniform earlier one.
    is_new = uniform["recurrence"] >= knobs.recurrence
    is_new = is_new | (query_index == 0)
    parent_draw = uniform["parent"]
    parent = jnp.floor(parent_draw * query_index.astype(jnp.float32)).astype(jnp.int32)
    parent = jnp.minimum(parent, jnp.maximum(query_index - 1, 0))
    need = _resolve_needs(is_new, parent)
    jitter = normal["jitter"]
    query_factors = need_factors[need] + knobs.need_jitter * jitter
    query_factors = jnp.where(active, query_factors, 0.0)
    query_factors = query_factors / jnp.linalg.norm(
        query_factors, axis=-1, keepdims=True
    )

    # 3. Graded true relevance, standardized per query over all memories.
    logits = query_factors @ memory_factors.T  # [T, M]
    mean = logits.mean(axis=-1, keepdims=True)
    spread = logits.std(axis=-1, keepdims=True)
    standardized = (logits - mean) / jnp.maximum(spread, 1e-6)
    relevant_count = jnp.clip(knobs.relevant_per_query, 1, pool_size - 1)
    top_values, _ = jax.lax.top_k(standardized, pool_size)  # [T, N], descending
    last_relevant = jnp.take(top_values, relevant_count - 1, axis=-1)
    first_irrelevant = jnp.take(top_values, relevant_count, axis=-1)
    threshold = (0.5 * (last_relevant + first_irrelevant))[:, None]
    truth = jax.nn.sigmoid(knobs.relevance_sharpness * (standardized - threshold))
    is_relevant = standardized > threshold  # [T, M], == truth > 0.5

    # 4. Arrivals: ids in insertion order, the initial ones at query 0.
    memory_index = jnp.arange(num_memories, dtype=jnp.int32)
    num_initial = jnp.round(knobs.initial_fraction * num_memories).astype(jnp.int32)
    num_initial = jnp.clip(num_initial, 0, num_memories)
    num_late = jnp.maximum(num_memories - num_initial, 1)
    arrival = 1 + ((memory_index - num_initial) * (num_queries - 1)) // num_late
    insert_time = jnp.where(memory_index < num_initial, 0, arrival).astype(jnp.int32)
    inserted = insert_time[None, :] <= query_index[:, None]  # [T, M]

    # 5. Similarity: a noisy proxy, blind to a semantic_gap share of relevant pairs.
    gap_draw = uniform["gap"][need]
    is_gapped = is_relevant & (gap_draw < knobs.semantic_gap)
    signal = jnp.where(is_gapped, knobs.gap_level, standardized)
    noise = normal["similarity_noise"]
    similarity = signal + knobs.similarity_noise * noise

    # 6. Pool: top N inserted memories by similarity.
    masked_similarity = jnp.where(inserted, similarity, -jnp.inf)
    pool_similarity, pool_ids = jax.lax.top_k(masked_similarity, pool_size)
    valid = jnp.take_along_axis(inserted, pool_ids, axis=-1)
    candidates = jnp.where(valid, pool_ids, 0).astype(jnp.int32)
    pool_similarity = jnp.where(valid, pool_similarity, -jnp.inf)
    pool_truth = jnp.where(valid, jnp.take_along_axis(truth, pool_ids, axis=-1), 0.0)
    pool_relevant = valid & jnp.take_along_axis(is_relevant, pool_ids, axis=-1)
    num_relevant = (is_relevant & inserted).sum(axis=-1, dtype=jnp.int32)

    # 7. Scorer answers: distorted truth plus noise; sometimes confidently wrong.
    scorer_noise = normal["scorer_noise"]
    answer = jnp.clip(
        pool_truth**knobs.scorer_exponent + knobs.scorer_noise * scorer_noise,
        0.0,
        1.0,
    )
    is_wrong = uniform["wrong"] < knobs.wrong_rate
    answer = jnp.where(is_wrong, 1.0 - answer, answer)
    if profile is not None:
        # A measured scorer instead: its answer distributions by relevance and
        # similarity rank, with its memory- and query-level correlation.
        answer = profile_answers(
            profile_key, profile, pool_relevant, candidates, num_memories, valid
        )
    answer = jnp.where(valid, answer, 0.0).astype(jnp.float32)

    in_pool = pool_relevant.sum(axis=-1, dtype=jnp.int32)
    pool_recall = jnp.where(
        num_relevant > 0,
        in_pool.astype(jnp.float32) / jnp.maximum(num_relevant, 1).astype(jnp.float32),
        0.0,
    )
    memory_embeddings = query_embeddings = None
    if config.embedding_dim:
        memory_embeddings, query_embeddings = _side_information(
            jax.random.fold_in(key, 8),
            memory_factors,
            query_factors,
            config.embedding_dim,
            knobs.side_information,
        )
    stream = Stream(
        queries=Query(
            candidates=candidates,
            similarity=pool_similarity.astype(jnp.float32),
            valid=valid,
        ),
        scores=answer,
        relevant=pool_relevant,
        insert_time=insert_time,
        num_relevant=num_relevant,
        category=(~is_new).astype(jnp.int32),
        relevant_memories=is_relevant,
        memory_embeddings=memory_embeddings,
        query_embeddings=query_embeddings,
    )
    details = SimDetails(
        need=need,
        is_repeat=~is_new,
        truth=pool_truth.astype(jnp.float32),
        pool_recall=pool_recall.astype(jnp.float32),
    )
    return stream, details


def _side_information(
    key: PRNGKey,
    memory_factors: Array,
    query_factors: Array,
    embedding_dim: int,
    strength: Array,
) -> tuple[Array, Array]:
    """Unit embeddings whose diagonal metric holds the relevance structure.

    The factors enter the first ``latent_dim`` dimensions scaled by a fixed
    random ``s_d`` (log-normal), so the plain cosine of two embeddings weighs
    the factor dimensions by ``s_d**2`` while the relevance logit weighs them
    equally: a learned diagonal metric (``1 / s_d**2``) recovers what cosine
    distorts. ``strength`` mixes that signal with independent noise in every
    dimension (0: the embeddings carry nothing; 1: all of it).
    """
    latent_dim = memory_factors.shape[-1]
    scale_key, memory_key, query_key = jax.random.split(key, 3)
    scales = jnp.exp(0.75 * jax.random.normal(scale_key, (latent_dim,)))

    def embed(factors: Array, noise_key: PRNGKey) -> Array:
        signal = factors * scales[None, :]
        signal = signal / jnp.maximum(
            jnp.linalg.norm(signal, axis=-1, keepdims=True), 1e-6
        )
        padded = jnp.pad(signal, ((0, 0), (0, embedding_dim - latent_dim)))
        noise = jax.random.normal(noise_key, padded.shape) / math.sqrt(embedding_dim)
        share = jnp.clip(strength, 0.0, 1.0)
        mixed = share * padded + jnp.sqrt(1.0 - share**2) * noise
        return mixed / jnp.maximum(jnp.linalg.norm(mixed, axis=-1, keepdims=True), 1e-6)

    return embed(memory_factors, memory_key), embed(query_factors, query_key)


def make_streams_with_details(
    key: PRNGKey,
    config: SimConfig,
    num_streams: int,
    knobs: SimKnobs | None = None,
    profile: ScorerProfile | None = None,
) -> tuple[Stream, SimDetails]:
    """Like :func:`make_streams`, also returning the hidden :class:`SimDetails`.

    Args:
      key: a PRNG key (``jax.random.key``). Stream ``s`` uses
        ``jax.random.fold_in(key, s)``, so it does not depend on ``num_streams``.
      config: static shapes (:class:`SimConfig`).
      num_streams: ``S`` (a Python int, static).
      knobs: :class:`SimKnobs`; leaves are scalars or ``(S,)`` arrays. ``None``
        means the defaults.
      profile: a measured scorer's :class:`~earm_jax.eval.scorer_profile.ScorerProfile`;
        when given, the answers are drawn from it (``scorer_noise``,
        ``scorer_exponent`` and ``wrong_rate`` then have no effect); ``None``:
        the simulated scorer of step 7.

    Returns:
      ``(stream, details)``, every leaf with a leading ``S`` axis.

    Raises:
      ValueError: for bad sizes or knob shapes (at trace time).
    """
    _validate(config)
    if num_streams < 1:
        raise ValueError(f"num_streams must be positive, got {num_streams}")
    knobs = _broadcast_knobs(SimKnobs() if knobs is None else knobs, num_streams)
    stream_keys = jax.vmap(lambda s: jax.random.fold_in(key, s))(
        jnp.arange(num_streams, dtype=jnp.uint32)
    )
    return jax.vmap(lambda k, kn: _make_stream(k, config, kn, profile))(
        stream_keys, knobs
    )


def make_streams(
    key: PRNGKey,
    config: SimConfig,
    num_streams: int,
    knobs: SimKnobs | None = None,
    profile: ScorerProfile | None = None,
) -> Stream:
    """Samples ``S`` independent synthetic streams (see the module docstring).

    Pure and deterministic per ``key``; jit with
    ``jax.jit(make_streams, static_argnums=(1, 2))`` (knobs stay traced).
    Arguments as for :func:`make_streams_with_details`.

    Returns:
      A :class:`~earm_jax.base.Stream` with a leading ``S`` axis on every leaf:
      ``queries`` (``int32/float32/bool[S, T, N]``, candidates in descending
      similarity), ``scores float32[S, T, N]``, ``relevant bool[S, T, N]``,
      ``insert_time int32[S, M]``, ``num_relevant int32[S, T]`` (inserted relevant
      memories, in the pool or not), ``category int32[S, T]`` (1 where the
      query repeats an earlier need, else 0) and ``relevant_memories
      bool[S, T, M]`` (the truth over every memory, for search expansion).

    Raises:
      ValueError: for bad sizes or knob shapes (at trace time).
    """
    stream, _ = make_streams_with_details(key, config, num_streams, knobs, profile)
    return stream


__all__ = [
    "SimConfig",
    "SimDetails",
    "SimKnobs",
    "make_streams",
    "make_streams_with_details",
]

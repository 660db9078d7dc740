"""The suite's own settings (tests/conftest.py) are in force where they should be."""

from __future__ import annotations

import os

import jax
import pytest

ASKED_FOR_OPTIMIZED = os.environ.get("EARM_TEST_OPTIMIZED") == "1"
SWITCH = os.environ.get("JAX_DISABLE_MOST_OPTIMIZATIONS")
CALLER_CHOSE = ASKED_FOR_OPTIMIZED or SWITCH not in (None, "1")


@pytest.mark.skipif(CALLER_CHOSE, reason="the caller chose XLA's optimizations")
def test_unmarked_tests_compile_with_most_optimizations_off():
    assert jax.config.read("jax_disable_most_optimizations") is True
    # Processes a test starts inherit the switch.
    assert os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] == "1"


@pytest.mark.xla_optimized
def test_marked_tests_compile_optimized():
    assert jax.config.read("jax_disable_most_optimizations") is False


def test_the_real_server_and_minilm_tests_are_grouped_for_one_worker(request):
    """pytest-xdist's ``loadgroup`` sees the groups the suite adds: the
    real-server tests share one worker (their servers start once), and so do
    the tests that embed all of LoCoMo with MiniLM. xdist tags a grouped test's
    id with ``@group``; with pytest 9.2 that tag is lost (pyproject.toml)."""
    items = request.session.items
    ungrouped = [
        item.nodeid
        for item in items
        if item.get_closest_marker("vllm") is not None
        and item.get_closest_marker("xdist_group") is None
    ]
    assert ungrouped == []
    if os.environ.get("PYTEST_XDIST_WORKER") and request.config.getvalue("loadgroup"):
        for item in items:
            marker = item.get_closest_marker("xdist_group")
            if marker is not None:
                assert item.nodeid.endswith("@" + marker.args[0]), item.nodeid


STRICT_DTYPES = os.environ.get("EARM_TEST_STRICT_DTYPES") == "1"


@pytest.mark.skipif(not STRICT_DTYPES, reason="EARM_TEST_STRICT_DTYPES=1 not set")
def test_strict_dtypes_switch_makes_implicit_promotion_raise():
    import jax.numpy as jnp

    assert jax.config.jax_numpy_dtype_promotion == "strict"
    with pytest.raises(jax.dtypes.TypePromotionError, match="strict"):
        jnp.ones(2, jnp.float32) + jnp.ones(2, jnp.int32)


@pytest.mark.parametrize("required", [False, True])
def test_a_missing_extra_skips_or_fails_naming_it(monkeypatch, required):
    """``EARM_REQUIRE_EXTRAS=1`` turns the skip of a missing extra into a
    failure that names the extra (as CI runs the suite)."""
    import optional_extras

    monkeypatch.setitem(optional_extras.EXTRA_OF, "earm_no_such_module", "nothing")
    monkeypatch.setenv("EARM_REQUIRE_EXTRAS", "1" if required else "0")
    outcome = pytest.fail.Exception if required else pytest.skip.Exception
    with pytest.raises(outcome, match=r'the "nothing" extra'):
        optional_extras.require_extra("earm_no_such_module")
    monkeypatch.setitem(optional_extras.EXTRA_OF, "json", "nothing")
    assert optional_extras.require_extra("json").dumps([]) == "[]"


SHARING = os.environ.get("EARM_TEST_SHARE_CORES", "1") != "0"
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


@pytest.mark.skipif(
    not SHARING
    or WORKERS < 2
    or not hasattr(os, "sched_getaffinity")
    or WORKERS > len(os.sched_getaffinity(os.getppid())),
    reason="needs Linux, 2+ pytest-xdist workers, no more than the cores, sharing on",
)
def test_each_worker_keeps_to_its_share_of_the_cores():
    """Under pytest-xdist each worker runs on its own share of the cores
    (worker i of n: every n-th core from the i-th), and so do the threads and
    processes it starts, so that thread pools sized from the cores do not
    oversubscribe them."""
    import subprocess
    import sys
    import threading

    index = int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw"))
    # The worker's parent is the pytest-xdist controller, on every core of the run.
    everything = sorted(os.sched_getaffinity(os.getppid()))
    expected = set(everything[index % WORKERS :: WORKERS])
    for thread in os.listdir("/proc/self/task"):
        try:
            assert os.sched_getaffinity(int(thread)) == expected, thread
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    seen = []
    started = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
    started.start()
    started.join()
    assert seen == [expected]
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == str(sorted(expected))

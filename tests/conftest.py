"""Shared fixtures: the LoCoMo data folder and one embedding cache per session."""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path

import jax
import pytest
from filelock import FileLock

# Strict settings, as equinox's tests: broadcasting between arrays of different
# ranks must be written out (an implicit rank promotion raises).
jax.config.update("jax_numpy_rank_promotion", "raise")

# The core and policy tests always run with strict dtype promotion (a fixture
# below); ``EARM_TEST_STRICT_DTYPES=1`` makes every test do so (processes a
# test starts inherit it through JAX's own variable).
if os.environ.get("EARM_TEST_STRICT_DTYPES") == "1":
    os.environ["JAX_NUMPY_DTYPE_PROMOTION"] = "strict"
    jax.config.update("jax_numpy_dtype_promotion", "strict")

REPO = Path(__file__).resolve().parents[1]
# Test helpers (planted.py, reference_numpy.py, locomo_facts.py) live here and
# are imported by tests in the subfolders that mirror the package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo_data import require_locomo  # noqa: E402

# Every XLA:CPU executable keeps a few memory mappings alive while JAX caches
# it; a whole test run compiles tens of thousands, and Linux refuses mappings
# past vm.max_map_count (65,530 by default), which XLA meets as a segfault in
# the next compile. Clearing JAX's caches when the count gets high frees them.
MAPS_FILE = Path("/proc/self/maps")
MAPS_BEFORE_CLEARING = 30_000


@pytest.fixture(autouse=True)
def _bounded_executable_mappings():
    yield
    if MAPS_FILE.exists():
        with MAPS_FILE.open("rb") as maps:
            count = sum(1 for _ in maps)
        if count > MAPS_BEFORE_CLEARING:
            jax.clear_caches()
            gc.collect()


# Test programs are small, so compiling is most of a test's time, and XLA's
# optimization passes are most of compiling (about a quarter of the core tests'
# time). The suite therefore compiles with them mostly off (JAX's own switch,
# inherited by the workers and every process a test starts). The passes do
# not change what a program computes beyond float rounding, which every
# tolerance covers; the tests that read the optimized program itself are
# marked ``xla_optimized`` and compile with them on, and so does every test of
# the core (``tests/core``), so that the solver is tested as users compile it.
# ``EARM_TEST_OPTIMIZED=1`` runs the whole suite optimized.
DISABLE_OPTIMIZATIONS = "JAX_DISABLE_MOST_OPTIMIZATIONS"


def _unoptimized_compiles() -> None:
    if os.environ.get("EARM_TEST_OPTIMIZED") == "1":
        return
    if DISABLE_OPTIMIZATIONS in os.environ:  # the caller's choice
        return
    os.environ[DISABLE_OPTIMIZATIONS] = "1"
    # This process imported JAX before the variable was set.
    jax.config.update("jax_disable_most_optimizations", True)


@pytest.fixture(autouse=True)
def _xla_optimized_when_marked(request):
    """Marked tests inspect the compiled program, so they get the optimized one."""
    marked = request.node.get_closest_marker("xla_optimized") is not None
    if not marked or not jax.config.read("jax_disable_most_optimizations"):
        yield
        return
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", True)


def _own_share_of_the_cores() -> None:
    """Each pytest-xdist worker keeps to its own share of the cores.

    XLA, LAPACK and torch size their thread pools from the cores a process
    may use; with every worker seeing every core, 2 workers on 2 cores run 4+
    compute threads, and the same tests take more CPU time (the claims tier
    about a third more, docs/getting-started.md). With a share each, a
    worker's pools fit its cores; processes a test starts inherit the share.
    ``EARM_TEST_SHARE_CORES=0`` leaves the workers on every core."""
    if os.environ.get("EARM_TEST_SHARE_CORES", "1") == "0":
        return
    if not hasattr(os, "sched_setaffinity"):  # Linux only (not macOS, Windows)
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = sorted(os.sched_getaffinity(0))
    if not worker.startswith("gw") or count < 2 or len(cores) < count:
        return
    share = set(cores[int(worker[2:]) % count :: count])
    # Every thread of the worker, not only this one: the kernel sets one
    # thread's mask, and threads started later inherit their creator's.
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), share)
        except ProcessLookupError:  # the thread ended meanwhile
            pass


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """One persistent XLA compilation cache per test run, shared by the xdist
    workers and every subprocess a test starts (they inherit the variable).
    Tests build the same programs many times (new closures, fresh processes,
    caches cleared below); a cached executable is the same code, so results
    are unchanged, and a whole run compiles less. A cache set by the
    caller is kept; ``EARM_TEST_COMPILATION_CACHE=0`` runs without one.
    Workers inherit the controller's folder and its optimization switch."""
    if hasattr(config, "workerinput"):
        _own_share_of_the_cores()
        return
    _unoptimized_compiles()
    if os.environ.get("EARM_TEST_COMPILATION_CACHE") == "0":
        return
    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        folder = config._tmp_path_factory.getbasetemp() / "xla-cache"
        folder.mkdir(exist_ok=True)
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(folder)
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        # This process imported JAX before the variables were set.
        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax.config.update(
            "jax_persistent_cache_min_compile_time_secs",
            float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
        )


# First, so that pytest-xdist's own hook (which reads the groups into the
# test ids the scheduler sees) finds the group markers added here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The durable retriever's tests (kill -9 runs, the agent loop, adapters:
    5-8 min together) are the slow tier as a whole folder, and so is every
    test measured at more than a few seconds (``tests/durations.json``), so
    that ``-m "not slow"`` stays the fast tier, except the ``basics`` (a few
    kill, lock and checksum cases) that the fast tier runs too. Under pytest-xdist
    (``--dist loadgroup``) the real-server tests share one worker, so the
    vLLM servers they share start once per run, not once per worker.

    The tests that take minutes (the real-server group, ~6 min on one worker,
    and the notebooks) run first: the scheduler hands out tests in this order,
    and short tests at the end keep both workers busy to the last minute
    instead of one long test running alone."""
    measured_slow = _measured_slow()
    for item in items:
        retriever = Path(str(item.path)).parent.name == "retriever"
        basics = item.get_closest_marker("basics") is not None
        if (retriever or item.nodeid in measured_slow) and not basics:
            item.add_marker(pytest.mark.slow)
        if _in_folder(item, "core"):
            item.add_marker(pytest.mark.xla_optimized)
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(pytest.mark.xdist_group("vllm-servers"))
    items.sort(key=_minutes_long_first)


DURATIONS = Path(__file__).parent / "durations.json"


def _measured_slow() -> set[str]:
    """The tests whose measured time (``tests/durations.json``, written by
    ``scripts/slow_tests.py`` from a run's ``--durations=0``) is at least the
    file's threshold: the slow tier, so that the fast tier fits a few
    minutes on 2 cores. A test not in the file counts as fast."""
    if not DURATIONS.exists():
        return set()
    recorded = json.loads(DURATIONS.read_text(encoding="utf-8"))
    threshold = recorded["threshold_s"]
    return {test for test, s in recorded["seconds"].items() if s >= threshold}


def _minutes_long_first(item) -> int:
    if item.get_closest_marker("vllm") is not None:
        return 0
    if item.get_closest_marker("claims") is not None:
        return 1
    if Path(str(item.path)).name == "test_notebooks.py":
        return 1
    return 2


def _in_folder(item, name: str) -> bool:
    """Whether ``item`` is a test of ``tests/<name>/`` (never one collected
    outside ``tests/``, such as a module's doctests)."""
    try:
        parts = Path(str(item.path)).relative_to(Path(__file__).parent).parts
    except ValueError:
        return False
    return parts[0] == name


STRICT_FOLDERS = ("core", "policies")


@pytest.fixture(autouse=True)
def _strict_dtypes_in_the_core(request):
    """The core and the policies run every test with strict dtype promotion
    (a float64 scalar or an int array meeting a float32 one raises unless cast
    by hand), as equinox's tests do: library code users trace under their
    own settings must not depend on the standard promotion lattice."""
    if not any(_in_folder(request.node, name) for name in STRICT_FOLDERS):
        yield
        return
    with jax.numpy_dtype_promotion("strict"):
        yield


def shared_tmp_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder every pytest-xdist worker of this run sees (the workers'
    base folders sit side by side in one run folder); the session's own
    base folder when the tests run in one process."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / name
    folder.mkdir(exist_ok=True)
    return folder


def build_once(folder: Path, build) -> None:
    """Runs ``build(folder)`` in the first process that gets here; the other
    xdist workers wait on the lock and reuse what it wrote."""
    done = folder / "built"
    with FileLock(str(folder) + ".lock"):
        if not done.exists():
            build(folder)
            done.write_text("ok")


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    """The LoCoMo folder. Missing data fails the test (CI always has it) unless
    ``EARM_ALLOW_MISSING_DATA=1`` asks for a skip."""
    return require_locomo()


@pytest.fixture(scope="session")
def embedding_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One embedding cache for the whole run, shared by the xdist workers
    (SQLite takes concurrent writers): each text is embedded once."""
    configured = os.environ.get("EARM_CACHE_DIR")
    return (
        Path(configured)
        if configured
        else shared_tmp_dir(tmp_path_factory, "embeddings")
    )


@pytest.fixture(scope="session")
def conversations(locomo_path: Path):
    """The shared LoCoMo conversations, loaded once per session."""
    from earm_jax.locomo import load_locomo

    return load_locomo(locomo_path)


@pytest.fixture(scope="session")
def trained_scorer(locomo_path: Path, embedding_cache_dir: Path, tmp_path_factory):
    """A cross-encoder trained for seconds on a slice of two conversations with
    two folds (cross-fitted), its held-out pools scored into a score cache:
    a real model folder for code-path tests, not a useful ranker.

    Returns ``(folder, score cache path, manifest)``.
    """
    from earm_jax.jobs.progress import Progress
    from earm_jax.jobs.train_scorer import run_train_scorer
    from earm_jax.jobs.train_scorer_job import TrainScorerJob
    from earm_jax.scoring.cross_encoder_training import TrainingSettings

    def train(root: Path) -> None:
        with open(root / "progress.log", "w") as log:
            run_train_scorer(
                TrainScorerJob(
                    data=str(locomo_path),
                    out=str(root / "scorer"),
                    conversations=("26", "30"),
                    limit=4,
                    folds=2,
                    validation_fraction=0.5,
                    training=TrainingSettings(
                        max_steps=2, group_size=6, groups_per_step=2
                    ),
                    cache_dir=str(embedding_cache_dir),
                    score_cache=str(root / "scores.sqlite"),
                ),
                Progress(stream=log),
            )

    # Trained once per run: the tests only read the folder and the score cache.
    root = shared_tmp_dir(tmp_path_factory, "trained-scorer")
    build_once(root, train)
    manifest = json.loads((root / "scorer" / "manifest.json").read_text())
    return root / "scorer", root / "scores.sqlite", manifest

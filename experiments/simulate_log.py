"""``earm simulate`` with the history kept as an entry log.

The CLI has no option for the history layout (``SolverConfig.entry_capacity``,
``block_entries``); this runs the same command with every solver config the
job builds given an entry log that never drops (``capacity * max_budget``
entries) and ``--block-entries`` (0: the whole block, the row step's
arithmetic). All other arguments go to ``earm simulate`` unchanged.

    python experiments/simulate_log.py --block-entries 400 -- --solver incremental \
        --json experiments/results/simulate_incremental_log_b400.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from earm_jax import settings as earm_settings  # noqa: E402
from earm_jax.cli.main import main as cli_main  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block-entries", type=int, default=0)
    args, rest = parser.parse_known_args()
    rest = [arg for arg in rest if arg != "--"]
    original = earm_settings.EarmSettings.solver_config

    def with_log(self, num_memories, capacity, pool_size, max_budget=None):
        config = original(self, num_memories, capacity, pool_size, max_budget)
        if config.solver != "incremental":
            return config
        return config._replace(
            entry_capacity=config.capacity * config.max_budget,
            block_entries=args.block_entries,
        )

    earm_settings.EarmSettings.solver_config = with_log
    sys.argv = ["earm", "simulate", *rest]
    cli_main()


if __name__ == "__main__":
    main()

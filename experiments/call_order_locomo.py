"""``best`` and ``best_side`` on LoCoMo with AdaptiveConfig overrides (e.g. the
learned call order), through ``earm locomo``'s own job, on the evidence
stand-in or a build's recorded answers.

    python experiments/call_order_locomo.py --config '{"call_order": "learned"}' \
        [--scores FILE] [--conversations 26,48] [--call-budget 0.25] \
        [--noise 0.1] [--graded 0.5] [--memories turns] [--out X.json]

Prints, per policy, Recall@10 and calls, and ``best``/``best_side`` against
Top-similarity with the paired 95% CI; the anchored policies are held at the
cap (``--budget-scale auto``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.jobs.locomo import LocomoJob, run_locomo_job  # noqa: E402
from earm_jax.jobs.metadata import command_line, write_json  # noqa: E402
from earm_jax.policies.adaptive import AdaptiveConfig  # noqa: E402
from earm_jax.settings import EarmSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="{}", help="AdaptiveConfig overrides")
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--scores", default="", help="recorded answers (comma list)")
    parser.add_argument("--conversations", default="")
    parser.add_argument("--memories", default="turns")
    parser.add_argument("--call-budget", type=float, default=0.25)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--graded", type=float, default=0.0)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--rank", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    overrides = json.loads(args.config)

    def adaptive_config(self, pool_size):
        if self.preset != "best":
            return None
        return AdaptiveConfig(
            pool_size=pool_size, call_budget=self.call_budget, **overrides
        )

    EarmSettings.adaptive_config = adaptive_config  # this script's variant only
    job = LocomoJob(
        data=args.data,
        settings=(args.memories,),
        scorer="recorded" if args.scores else "evidence",
        scores=tuple(s for s in args.scores.split(",") if s),
        noises=(args.noise,),
        graded=args.graded,
        ks=(10,),
        ranks=(args.rank,),
        conversations=tuple(c for c in args.conversations.split(",") if c),
        limit=args.limit,
        earm=EarmSettings(preset="best", call_budget=args.call_budget),
        auto_budget_scale=True,
        side_information=True,
        num_resamples=1000,
    )
    payload, _ = run_locomo_job(job)
    payload["adaptive_overrides"] = overrides
    payload["command"] = command_line("python experiments/call_order_locomo.py")
    results, contrasts = payload["results"], payload["contrasts"]
    for name, row in results.items():
        recall = row["recall@10"]["mean"]
        print(f"{name:18s} recall@10 {recall:.3f} calls {row['calls']}")
    for key in ("best-top_similarity", "best_side-top_similarity", "best_side-best"):
        if key in contrasts:
            c = contrasts[key]["recall@10"]
            low, high = c["ci"]
            print(f"{key:26s} {c['mean']:+.3f} [{low:+.3f}, {high:+.3f}]")
    if args.out:
        write_json(args.out, payload)


if __name__ == "__main__":
    main()

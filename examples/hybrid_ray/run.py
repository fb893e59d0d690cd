"""examples/hybrid_ray: train examples/hybrid_parallel's vision-language model on a one-machine Ray cluster
(127.0.0.1) with one actor group per module, print a progress line per step and a summary, and write an
HTML report. One command:

    python examples/hybrid_ray/run.py [--config examples/hybrid_ray/config.json] [--out DIR]
                                      [--kill-rank R --kill-at-step S] [--binary build/release/examples/hybrid_parallel]

--kill-rank R --kill-at-step S: ray.kill rank R's actor once every rank has finished step S, to watch the
run restart from its latest checkpoint (the config's max_restarts must allow it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from jitembed.ray import hybrid
from jitembed.ray.local import local_cluster

sys.path.insert(0, str(Path(__file__).parent))
from report import write_report  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(HERE / "config.json"))
    p.add_argument("--out", default="hybrid_ray_out", help="report.html, summary.json and the checkpoints go here")
    p.add_argument("--binary", default=os.environ.get(hybrid.BINARY_ENV, str(ROOT / "build/release/examples/hybrid_parallel")))
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-at-step", type=int, default=0)
    a = p.parse_args()
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        c = hybrid.HybridConfig.from_json(a.config)
        c.binary = c.binary or a.binary
        c.checkpoint_dir = c.checkpoint_dir or str(out / "checkpoints")
        if a.kill_rank >= 0:
            c.pause_at_step = a.kill_at_step  # hold the ranks there so that the kill lands at that step
        c.validate()
    except hybrid.HybridConfigError as e:
        print(e, file=sys.stderr)
        return 2

    def kill(progress, run):
        if a.kill_rank >= 0 and progress["step"] == a.kill_at_step and run.restarts == 0:
            import ray

            print(f"run.py: ray.kill(actor of rank {a.kill_rank}) after step {a.kill_at_step}", flush=True)
            ray.kill(run.actors[a.kill_rank], no_restart=True)

    try:
        with local_cluster(serve=False, **hybrid.required_cluster(c)):
            summary = hybrid.train(c, on_step=kill)
    except (hybrid.HybridConfigError, hybrid.HybridRunError) as e:
        print(e, file=sys.stderr)
        return 1
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    write_report(str(out / "report.html"), summary)
    print(f"run.py: report {out / 'report.html'}")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("per_step", "groups")}))
    losses = summary["losses"]
    k = max(1, len(losses) // 4)  # each step trains on a new random batch: compare the first and last quarters
    falls = sum(losses[-k:]) / k < sum(losses[:k]) / k
    print(f"run.py: loss {'falls' if falls else 'does not fall'} (mean of the first {k} steps vs the last {k})")
    return 0 if falls and len(losses) == c.steps else 1


if __name__ == "__main__":
    sys.exit(main())

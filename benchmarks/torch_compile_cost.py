"""torch.compile of an off-policy learner's update through RLlib's own switch: compile seconds
against milliseconds per update (issue 102, scope 5).

    python benchmarks/torch_compile_cost.py [--tasks sac_halfcheetah] [--updates 500]

RLlib compiles a learner with ``config.framework(torch_compile_learner=True,
torch_compile_learner_what_to_compile=...)``: ``forward_train`` (the modules' training forward
pass) or ``complete_update`` (the whole update, metrics logging included). Each variant runs in a
process of its own with an empty inductor cache (the compile a user's first run pays), one after
the other, ``--rounds`` times in turn: the experiment's trial is built as
``benchmarks/offpolicy_cost.py`` builds it, with the switch set on its RLlib config, trained past
the learning start (where the first update, and so the compile, happens), then ``--updates``
updates on replayed batches are timed after 50 more. Results go to
benchmarks/results/torch_compile_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from harness import REPO, invocation, load_results, machine, results_file, save_results
from offpolicy_cost import LEARNING_STARTS, TASKS

RESULTS = results_file("torch_compile_cost.json")
VARIANTS = ("none", "forward_train", "complete_update")


def measure(task_name: str, variant: str, updates: int) -> dict[str, float]:
    """One variant in this process: seconds to the learning start (the compile included) and
    milliseconds per update afterwards."""
    import torch

    import rlplat.run.trainable as trainable
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.trials import trainable_for

    task = TASKS[task_name]
    overrides = [*task.overrides, f"training.{task.learning_starts_key}={LEARNING_STARTS}"]
    run = prepare(load_experiment(REPO / task.experiment, overrides), step_env=False)
    torch.set_num_threads(max(1, int(run.algo_config.num_cpus_for_main_process)))
    plain = trainable.algorithm_config

    def compiled(config: dict) -> object:  # the trial's RLlib config with RLlib's switch set
        built = plain(config)
        if variant != "none":
            built.framework(
                torch_compile_learner=True, torch_compile_learner_what_to_compile=variant
            )
        return built

    trainable.algorithm_config = compiled
    algo = trainable_for(run.experiment.algorithm)(config=run.resolved())
    started = time.perf_counter()
    while algo.train()["num_env_steps_sampled_lifetime"] < LEARNING_STARTS + 200:
        pass
    to_learning_s = time.perf_counter() - started
    timesteps = {"num_env_steps_sampled_lifetime": LEARNING_STARTS + 200}

    def update() -> None:
        batch = algo.replayed_batch()
        algo.learner_group.update(batch=batch, timesteps=timesteps, _no_metrics_reduce=True)

    for _ in range(50):
        update()
    started = time.perf_counter()
    for _ in range(updates):
        update()
    update_ms = 1000 * (time.perf_counter() - started) / updates
    algo.stop()
    return {"to_learning_start_s": round(to_learning_s, 1), "update_ms": round(update_ms, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=["sac_halfcheetah"])
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one process's
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(measure(args.tasks[0], args.variant, args.updates)))
        return
    saved = load_results(RESULTS)
    for name in args.tasks:
        rows: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
        for round_ in range(args.rounds):
            for variant in VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]:
                command = [sys.executable, __file__, "--tasks", name, "--variant", variant,
                           "--updates", str(args.updates)]  # fmt: skip
                with tempfile.TemporaryDirectory() as cache:
                    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
                    done = subprocess.run(
                        command, capture_output=True, text=True, check=True, env=environment
                    )
                rows[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(name, variant, rows[variant][-1], flush=True)
        saved[name] = {
            "command": invocation(),
            "machine": machine(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "updates_timed": args.updates,
            "variants": rows,
        }
        save_results(RESULTS, saved)


if __name__ == "__main__":
    main()

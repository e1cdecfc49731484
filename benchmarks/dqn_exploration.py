"""Microseconds of one epsilon-greedy act of DQN's module: rlplat's against RLlib's.

    python benchmarks/dqn_exploration.py [--rounds 5] [--calls 3000]

Builds ``experiments/cartpole_dqn.yaml``'s algorithm as a trial does and times its env runner's
module acting on a batch of 4 observations (the experiment's 4 envs), in alternating rounds
in this one process: rlplat's ``DQNModule.forward_exploration`` against RLlib's
``DefaultDQNTorchRLModule._forward_exploration`` on the same module, after the mode switch
RLlib's ``forward_exploration`` makes around each call. Results go to
benchmarks/results/dqn_exploration.json.
"""

from __future__ import annotations

import argparse
import time
from statistics import median

from harness import REPO, invocation, machine, results_file, save_results

RESULTS = results_file("dqn_exploration.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()

    import torch
    from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import (
        DefaultDQNTorchRLModule,
    )
    from ray.rllib.core.columns import Columns

    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.trials import trainable_for

    torch.set_num_threads(1)
    path = REPO / "experiments/cartpole_dqn.yaml"
    run = prepare(load_experiment(path, ["evaluation.evaluation_interval=null"]), step_env=False)
    algo = trainable_for("DQN")(config=run.resolved())
    module = algo.env_runner.module
    batch = {Columns.OBS: torch.randn(4, 4)}

    def rlplats() -> None:
        module.forward_exploration(batch, t=5000)

    def rllibs() -> None:
        with torch.no_grad():
            module.train(False)
            DefaultDQNTorchRLModule._forward_exploration(module, batch, t=5000)

    micros: dict[str, list[float]] = {"rlplat": [], "rllib": []}
    for _ in range(args.rounds):
        for name, act in (("rlplat", rlplats), ("rllib", rllibs)):
            for _ in range(200):
                act()
            started = time.perf_counter()
            for _ in range(args.calls):
                act()
            micros[name].append(round(1e6 * (time.perf_counter() - started) / args.calls, 1))
    algo.stop()
    results = {
        "command": invocation(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "module": f"{type(module).__module__}:{type(module).__qualname__}",
        "us_per_act": micros,
        "median_us": {name: median(values) for name, values in micros.items()},
    }
    save_results(RESULTS, results)
    for name, values in micros.items():
        print(f"{name}: {values} us per act, median {median(values)}")


if __name__ == "__main__":
    main()

"""Issue 103's memory table: no memory, RLlib's LSTM, rlplat's GRU and attention memory on Recall
(envs/recall.py), over how far back the task looks, 3 seeds each at equal env steps.

    python benchmarks/memory.py [--delays 1 4 8 12] [--memories none lstm gru attention] [--out DIR]

Each cell: ``rlplat train experiments/recall_attention.yaml --seeds 3 tune.max_concurrent=1
stop.env_steps=30000 env.kwargs.delay=<d> rl_module.model_config=<memory>`` (one trial at a
time; a run found unfinished under ``--out`` is continued with ``--resume``), then ``rlplat
report <run> --eval-episodes 20``: the IQM and mean of the seeds' greedy returns at the end.
Episodes are 16 steps, ``16 - delay`` of them paid; without memory a policy earns half of those.
Every memory is 32 wide, on a 32-unit observation MLP, trained on 16-step sequences (whole
episodes); the attention attends to the last 16 steps. Results go to
benchmarks/results/memory.json with the commit that made them.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import (
    load_results,
    provenance,
    results_file,
    save_results,
    scored_seeds,
)

RESULTS = results_file("memory.json")
EXPERIMENT = "experiments/recall_attention.yaml"
BUDGET = 30_000
SEEDS = 3
EPISODES = 20
LENGTH = 16
COMMON = "max_seq_len: 16, fcnet_hiddens: [32]"
MEMORIES = {
    "none": "{fcnet_hiddens: [32]}",
    "lstm": f"{{use_lstm: true, lstm_cell_size: 32, {COMMON}}}",
    "gru": f"{{memory: {{type: gru, size: 32}}, {COMMON}}}",
    "attention": f"{{memory: {{type: attention, size: 32, steps: 16}}, {COMMON}}}",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", nargs="+", type=int, default=[1, 4, 8, 12])
    parser.add_argument("--memories", nargs="+", choices=list(MEMORIES), default=list(MEMORIES))
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rlplat-memory")
    args = parser.parse_args()
    results = load_results(RESULTS)
    for delay in args.delays:
        for memory in args.memories:
            overrides = (f"env.kwargs.delay={delay}", f"rl_module.model_config={MEMORIES[memory]}")
            out = args.out / f"delay_{delay}" / memory
            _, cell = scored_seeds(EXPERIMENT, SEEDS, BUDGET, out, EPISODES, *overrides)
            results.setdefault(f"delay_{delay}", {})[memory] = {
                **cell,
                "paid_steps": LENGTH - delay,
                **provenance(),
            }
            save_results(RESULTS, results)
            print(
                f"delay {delay} {memory}: IQM {cell['iqm']} over {cell['final_scores']}", flush=True
            )


if __name__ == "__main__":
    main()

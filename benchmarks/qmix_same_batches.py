"""rlplat's QMIX update beside EPyMARL's own ``QLearner``: same batches, same initial weights.

Both learners start from rlplat's initial weights (copied into EPyMARL's agent network, mixer and
their target copies) and take ``--updates`` updates on the same batches of 32 whole episodes,
drawn from the replay memory kept in a checkpoint of ``experiments/marl/lbf_qmix.yaml``. rlplat's
update goes through RLlib's ``LearnerGroup.update`` as in training; EPyMARL's is
``src/learners/q_learner.py`` imported from ``--epymarl-src`` with the settings of its
``qmix.yaml`` and ``default.yaml`` (the ones ``benchmarks/epymarl.py --qmix`` runs). Only
full-length episodes are drawn, because EPyMARL's reward statistics also count the padding of
shorter ones, and EPyMARL's reward variance is taken without Bessel's correction, as rlplat's.

Each line printed is one update: both losses and their relative difference. Two float32
learners diverge after enough updates even when they compute the same thing (a near-tie in a
double-Q argmax breaks the other way); ``--perturb`` prints EPyMARL's learner beside a copy of
itself whose every weight was moved by about 1e-7 of itself (float32 rounding), which shows how
soon that happens.

    python benchmarks/qmix_same_batches.py --epymarl-src DIR --checkpoint CHECKPOINT [--perturb]
"""

from __future__ import annotations

import argparse
import copy
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
BATCH_EPISODES = 32
EPISODE_STEPS = 50  # the task's time limit: only whole 50-step episodes are drawn
# EPyMARL's qmix.yaml on default.yaml, with the sizes of Foraging-8x8-2p-2f-coop-v3.
EPYMARL_ARGS = dict(
    n_agents=2, n_actions=6, obs_shape=12, state_shape=24, agent="rnn", use_rnn=False,
    hidden_dim=64, obs_agent_id=True, obs_last_action=False, obs_individual_obs=False,
    agent_output_type="q", action_selector="epsilon_greedy", epsilon_start=1.0,
    epsilon_finish=0.05, epsilon_anneal_time=50000, evaluation_epsilon=0.0, mixer="qmix",
    mixing_embed_dim=32, hypernet_layers=2, hypernet_embed=64, common_reward=True,
    standardise_rewards=True, standardise_returns=False, double_q=True, gamma=0.99, lr=5e-4,
    grad_norm_clip=10, target_update_interval_or_tau=200, learner_log_interval=0,
    use_cuda=False, device="cpu",
)
SCHEME = {
    "state": {"vshape": 24},
    "obs": {"vshape": 12, "group": "agents"},
    "actions": {"vshape": (1,), "group": "agents", "dtype": torch.long},
    "avail_actions": {"vshape": (6,), "group": "agents", "dtype": torch.int},
    "reward": {"vshape": (1,)},
    "terminated": {"vshape": (1,), "dtype": torch.uint8},
}


def stored_episodes(checkpoint: Path) -> list[dict[str, np.ndarray]]:
    """The whole 50-step episodes in the checkpoint's replay memory."""
    state = pickle.loads((checkpoint / "algorithm_state.pkl").read_bytes())
    episodes = state["rlplat_replay_memory"]["episodes"]
    return [e for e in episodes if len(e["actions"]) == EPISODE_STEPS]


def epymarl_learner(src: Path) -> tuple[Any, list[float]]:
    """EPyMARL's QLearner and the list its logger appends each update's loss to."""
    sys.path.insert(0, str(src / "src"))
    import components.standarize_stream as stream  # noqa: PLC0415
    from controllers.basic_controller import BasicMAC  # noqa: PLC0415
    from learners.q_learner import QLearner  # noqa: PLC0415

    def update_without_bessel(self: Any, values: torch.Tensor) -> None:
        values = values.reshape(-1, values.size(-1))
        self.update_from_moments(
            values.mean(dim=0), values.var(dim=0, unbiased=False), values.shape[0]
        )

    stream.RunningMeanStd.update = update_without_bessel
    args = SimpleNamespace(**EPYMARL_ARGS)
    losses: list[float] = []
    logger = SimpleNamespace(
        log_stat=lambda key, value, t: losses.append(value) if key == "loss" else None
    )
    mac = BasicMAC(SCHEME, {"agents": args.n_agents}, args)
    return QLearner(mac, SCHEME, logger, args), losses


def copy_rlplat_weights(module: Any, learner: Any) -> None:
    pairs = [
        (module.agent.fc1, learner.mac.agent.fc1),
        (module.agent.core, learner.mac.agent.rnn),
        (module.agent.fc2, learner.mac.agent.fc2),
        (module.mixer.hyper_w1, learner.mixer.hyper_w_1),
        (module.mixer.hyper_b1, learner.mixer.hyper_b_1),
        (module.mixer.hyper_w2, learner.mixer.hyper_w_final),
        (module.mixer.value, learner.mixer.V),
    ]
    with torch.no_grad():
        for ours, theirs in pairs:
            for mine, peer in zip(ours.parameters(), theirs.parameters(), strict=True):
                peer.copy_(mine)
    learner._update_targets_hard()


def rlplat_learner() -> Any:
    """rlplat's QMIX algorithm for the shipped LBF file, built locally (its learner updates)."""
    import ray  # noqa: PLC0415

    from rlplat.experiment.load import load_experiment  # noqa: PLC0415
    from rlplat.prepare.run_spec import prepare  # noqa: PLC0415

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    loaded = load_experiment(
        REPO / "experiments/marl/lbf_qmix.yaml",
        # EPyMARL's QLearner has one-step targets only; the shipped file uses TD(lambda).
        ["evaluation.evaluation_interval=null", "training.td_lambda=0"],
    )
    return prepare(loaded, probe=False).algo_config.build_algo()


def epymarl_batch(picked: list[dict[str, np.ndarray]]) -> Any:
    from components.episode_buffer import EpisodeBatch  # noqa: PLC0415

    batch = EpisodeBatch(SCHEME, {"agents": 2}, len(picked), EPISODE_STEPS + 1, device="cpu")
    data = batch.data.transition_data
    for row, episode in enumerate(picked):
        data["obs"][row] = torch.as_tensor(episode["obs"])
        data["state"][row] = torch.as_tensor(episode["state"])
        data["avail_actions"][row] = 1
        data["actions"][row, :-1, :, 0] = torch.as_tensor(episode["actions"])
        data["reward"][row, :-1, 0] = torch.as_tensor(episode["rewards"])
        data["terminated"][row, :-1, 0] = torch.as_tensor(episode["terminated"]).to(torch.uint8)
        data["filled"][row] = 1  # the step after the last one holds the final observation
    return batch


def rlplat_batch(picked: list[dict[str, np.ndarray]]) -> Any:
    """The batch rlplat's QMIX replays, made by its own ``padded_batch``."""
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch  # noqa: PLC0415

    from rlplat.algorithms.qmix.episode_store import padded_batch  # noqa: PLC0415

    arrays = padded_batch(picked)
    return MultiAgentBatch(
        {"default_policy": SampleBatch(arrays)}, env_steps=int(arrays["filled"].sum())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epymarl-src", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a checkpoint of lbf_qmix.yaml (its replay memory is drawn from)")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--perturb", action="store_true",
                        help="EPyMARL against itself with every weight moved by about 1e-7 of it")
    args = parser.parse_args()
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME  # noqa: PLC0415

    episodes = stored_episodes(args.checkpoint)
    peer, peer_losses = epymarl_learner(args.epymarl_src.resolve())
    algo = rlplat_learner()
    copy_rlplat_weights(algo.learner_group._learner.module["default_policy"].unwrapped(), peer)
    if args.perturb:
        other, other_losses = copy.deepcopy(peer), []
        other.logger = SimpleNamespace(
            log_stat=lambda key, value, t: other_losses.append(value) if key == "loss" else None
        )
        with torch.no_grad():
            for weight in other.params:
                weight.mul_(1 + 1e-7 * torch.randn_like(weight))
        other._update_targets_hard()
    rng = np.random.default_rng(0)
    for update in range(args.updates):
        picked = [episodes[i] for i in rng.choice(len(episodes), BATCH_EPISODES, replace=False)]
        batch = epymarl_batch(picked)
        peer.train(batch, t_env=update + 1, episode_num=update)
        if args.perturb:
            other.train(batch, t_env=update + 1, episode_num=update)
            ours = other_losses[-1]
        else:
            results = algo.learner_group.update(
                batch=rlplat_batch(picked), timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: 0}
            )
            ours = float(results[0]["default_policy"]["total_loss"].peek())
        theirs = peer_losses[-1]
        print(f"{update:4d}  {ours:12.6f}  {theirs:12.6f}  {abs(ours - theirs) / abs(theirs):.2e}")


if __name__ == "__main__":
    main()

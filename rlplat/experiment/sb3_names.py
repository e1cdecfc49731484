"""Stable-Baselines3's names for settings, told apart from rlplat's before anything heavy loads.

A researcher coming from SB3 writes ``training.learning_rate`` or ``n_epochs``; RLlib, and so
rlplat, calls them ``lr`` and ``num_epochs``. Those keys would be refused anyway, but only once
RLlib's config classes are imported and the env is built, with a list of 27 keys and no hint.
Here they are refused as the file loads, naming rlplat's key and what it means here. Names SB3
shares with RLlib (``gamma``, ``tau``, ``policy_delay``, ``target_noise_clip``, ``seed``) are
not listed: they are right as written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlplat.errors import ConfigError

# SB3 key -> where rlplat takes that setting, and what it means here.
SB3_NAMES: dict[str, str] = {
    "learning_rate": "training.lr (or training.actor_lr and training.critic_lr, and SAC's "
    "training.alpha_lr, where the algorithm has an optimizer per network); a schedule is "
    "[[env_step, lr], ...]",
    "n_steps": "training.train_batch_size_per_learner: env steps per update over all envs "
    "together, SB3's n_steps x n_envs (resources.env_runners.envs sets the envs)",
    "batch_size": "training.minibatch_size for PPO's minibatches; for the off-policy "
    "algorithms (DQN, SAC, TD3, ...) the replayed batch of each update is "
    "training.train_batch_size_per_learner",
    "n_epochs": "training.num_epochs: passes over each train batch",
    "gae_lambda": "training.lambda_: GAE's lambda",
    "ent_coef": "training.entropy_coeff for PPO, APPO and IMPALA; SAC always learns its "
    "temperature, from training.initial_alpha towards training.target_entropy",
    "vf_coef": "training.vf_loss_coeff: the value loss's weight",
    "max_grad_norm": "training.grad_clip: gradients clipped to this global norm "
    "(training.grad_clip_by: global_norm, RLlib's default)",
    "clip_range": "training.clip_param: PPO's ratio clip",
    "clip_range_vf": "training.vf_clip_param: RLlib clips the value loss itself at this "
    "value, not the change of the value as SB3 does",
    "target_kl": "training.kl_target with training.use_kl_loss: true: RLlib adapts a KL "
    "penalty towards it instead of stopping the epoch early",
    "buffer_size": "training.replay_buffer_config: {capacity: N}",
    "learning_starts": "training.num_steps_sampled_before_learning_starts",
    "train_freq": "training.training_intensity: replayed transitions per sampled env step, "
    "SB3's gradient_steps x batch_size / (train_freq x n_envs)",
    "gradient_steps": "training.training_intensity: replayed transitions per sampled env "
    "step, SB3's gradient_steps x batch_size / (train_freq x n_envs)",
    "target_update_interval": "training.target_network_update_freq: env steps between "
    "target-network updates",
    "exploration_fraction": "training.epsilon: a schedule [[0, 1.0], [env_step, final]] "
    "(SB3's exploration_fraction x total_timesteps is that env_step)",
    "exploration_initial_eps": "training.epsilon: a schedule [[0, initial], [env_step, final]]",
    "exploration_final_eps": "training.epsilon: a schedule [[0, initial], [env_step, final]]",
    "target_policy_noise": "training.target_noise: TD3's target policy smoothing",
    "action_noise": "training.exploration_noise for TD3 and DDPG: the std of Gaussian acting "
    "noise in [-1, 1] action units",
    "policy_kwargs": "rl_module.model_config, e.g. {fcnet_hiddens: [64, 64]} for net_arch=[64, 64]",
    "total_timesteps": "stop.env_steps",
    "n_envs": "resources.env_runners.envs: envs per env runner",
}

# SB3 names that an algorithm here also takes, as its own setting (DreamerV3's gae_lambda,
# QMIX's target_update_interval): refused only where the algorithm's config lacks them, by the
# RLlib key check, whose message then adds sb3_hint().
TAKEN_BY_SOME_ALGORITHM = frozenset({"gae_lambda", "target_update_interval"})

# Sections whose keys are RLlib's, where SB3's names turn up.
_SECTIONS = ("training", "env_runners")


def check_sb3_names(data: dict[str, Any], locate: Callable[[str], str]) -> None:
    """Refuse the first SB3 name among the experiment's top-level keys and its RLlib sections,
    naming rlplat's key for it."""
    places = [("", data)] + [
        (f"{section}.", data[section])
        for section in _SECTIONS
        if isinstance(data.get(section), dict)
    ]
    for prefix, values in places:
        for key in values:
            if key in SB3_NAMES and key not in TAKEN_BY_SOME_ALGORITHM:
                path = f"{prefix}{key}"
                raise ConfigError(sb3_hint(key).strip(), location=locate(path), key=path)


def sb3_hint(key: str) -> str:
    """`` 'key' is Stable-Baselines3's name; ...`` for an SB3 name, else ''."""
    if key not in SB3_NAMES:
        return ""
    return (
        f" '{key}' is Stable-Baselines3's name; rlplat (and RLlib) take it as "
        f"{SB3_NAMES[key]}. SB3's names side by side: "
        "docs/schema.md#coming-from-stable-baselines3."
    )

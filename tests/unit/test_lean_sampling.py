"""Env runners sample without the connector timers where every piece is RLlib's or rlplat's, and
their pipelines save and restore as any other."""

from __future__ import annotations

from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import COMPONENT_ENV_TO_MODULE_CONNECTOR
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from rlplat.environments.lean_sampling import QuietEnvToModule
from rlplat.environments.seeding import SeededSingleAgentEnvRunner
from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from tests.helpers import TINY_PPO


class UsersPiece(ConnectorV2):
    """A connector of the user's own, which may log metrics: its pipeline keeps the timers."""

    def __call__(self, *, batch, **kwargs):  # noqa: ANN001, ANN003, ANN204
        return batch


def runner_for(tmp_path, users_piece: bool) -> SeededSingleAgentEnvRunner:  # noqa: ANN001
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_PPO)
    config = prepare(load_experiment(path, []), step_env=False).algo_config.copy(copy_frozen=False)
    if users_piece:
        config.env_runners(env_to_module_connector=lambda env, spaces, device: UsersPiece())
    return SeededSingleAgentEnvRunner(config=config, worker_index=0)


def timer_keys(runner: SeededSingleAgentEnvRunner) -> list[str]:
    return [key for key in _flat(runner.get_metrics()) if "timers" in key and "connector" in key]


def _flat(tree: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in tree.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        keys.extend(_flat(value, name) if isinstance(value, dict) else [name])
    return keys


def test_standard_pipelines_sample_without_timers_and_restore(tmp_path):
    runner = runner_for(tmp_path, users_piece=False)
    try:
        assert type(runner.env_to_module) is QuietEnvToModule
        runner.sample(num_timesteps=20, random_actions=True)  # RLlib's own loop
        assert timer_keys(runner) == []
        runner.save_to_path(tmp_path / "runner")  # as an algorithm's checkpoint holds it
        restored = ConnectorPipelineV2.from_checkpoint(
            tmp_path / "runner" / COMPONENT_ENV_TO_MODULE_CONNECTOR
        )
        assert [type(piece) for piece in restored.connectors] == [
            type(piece) for piece in runner.env_to_module.connectors
        ]
    finally:
        runner.stop()


def test_a_users_piece_keeps_the_timers(tmp_path):
    runner = runner_for(tmp_path, users_piece=True)
    try:
        assert not isinstance(runner.env_to_module, QuietEnvToModule)
        runner.sample(num_timesteps=20, random_actions=True)
        assert any("users_piece" in key for key in timer_keys(runner))
    finally:
        runner.stop()


def test_quiet_pipeline_ignores_the_metrics_logger():
    logger = MetricsLogger()
    QuietEnvToModule(connectors=[])(
        rl_module=None, batch={}, episodes=[], explore=True, metrics=logger
    )
    assert logger.reduce() == {}

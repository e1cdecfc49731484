"""Videos of the policy during training: recorded from checkpoints, shown in TensorBoard.

The driver restores each selected checkpoint exactly as ``rlplat eval`` does (a fraction of a
second, no extra Ray actor), plays greedy episodes with the experiment's seed, and writes the GIF
to ``<trial>/videos/`` and to the trial's TensorBoard file (Images tab, tag ``eval/video``,
x = env steps). Recording from checkpoints keeps the training loop untouched.
"""

from __future__ import annotations

from pathlib import Path

from rlplat.callbacks.observers import Observer, TrialView
from rlplat.callbacks.tensorboard import TensorBoardWriter
from rlplat.checkpoints import RESOLVED_EXPERIMENT
from rlplat.experiment.load import load_experiment
from rlplat.experiment.schema import VideoSpec
from rlplat.metrics import ENV_STEPS, finite, lookup
from rlplat.policy.render import frame_rate, gif_bytes, label_frames, run_headless
from rlplat.policy.restore import Policy
from rlplat.policy.rollout import run_episode
from rlplat.rllib.env_creator import rebuild_env
from rlplat.rllib.multi_agent import mapping_for

VIDEO_TAG = "eval/video"


class TrainingVideos(Observer):
    """Records ``video.episodes`` greedy episodes at every ``video.every``-th iteration.

    The env is rebuilt from the experiment stored in the checkpoint: the trial's own, with the
    values a search chose for it.
    """

    def __init__(self, video: VideoSpec, tensorboard: TensorBoardWriter):
        self.video = video
        self.tensorboard = tensorboard

    def trial_checkpointed(self, trial: TrialView, checkpoint: Path) -> None:
        video = self.video
        result = trial.last_result
        done = int(result.get("training_iteration") or 0)
        if not video.every or done % video.every:
            return
        run_headless("gif")
        source = checkpoint / RESOLVED_EXPERIMENT
        experiment = load_experiment(source).experiment
        env = rebuild_env(experiment, "rgb_array", source)
        policy = Policy.from_checkpoint(checkpoint, mapping_for(experiment, env))
        frames = []
        try:
            for index in range(video.episodes):
                episode = run_episode(
                    policy.actor(),
                    env,
                    seed=(experiment.seed or 0) + index,
                    explore=False,
                    capture_frames=True,
                )
                frames += label_frames(episode.frames, episode.returns_before)
            fps = frame_rate(env.metadata, "gif")
        finally:
            env.close()
        data = gif_bytes(frames, fps, max_width=video.max_width)
        folder = trial.staging / "videos"
        folder.mkdir(exist_ok=True)
        (folder / f"iteration_{done:06d}.gif").write_bytes(data)
        steps = int(finite(lookup(result, ENV_STEPS)) or 0)
        self.tensorboard.add_gif(trial, VIDEO_TAG, data, step=steps)

"""The env runner QMIX samples whole episodes with: RLlib's, seeded once instead of every call.

RLlib 2.60's ``SingleAgentEnvRunner`` resets its envs at the start of every episode-count
``sample()`` call (what ``batch_mode: complete_episodes`` uses) and marks the next reset as an
"initial" one, which passes the configured seed again. With a seed set, every call therefore
replays the same episode: on simple_spread every training episode had the same landmarks, the
policy learned that one layout and failed on others. Seeding only the first reset keeps runs
reproducible and episodes different. Its envs' seeds are rlplat's independent ones
(``rlplat.environments.seeding``), and it samples lean (``rlplat.environments.lean_sampling``).
"""

from __future__ import annotations

from typing import Any

from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from rlplat.environments.lean_sampling import LeanSampling
from rlplat.environments.seeding import IndependentSeeds


class EpisodeEnvRunner(IndependentSeeds, LeanSampling, SingleAgentEnvRunner):
    def sample(self, *args: Any, **kwargs: Any) -> Any:
        episodes = super().sample(*args, **kwargs)
        # The next call still resets (it samples whole episodes) but lets the envs' random
        # generators run on instead of re-seeding them.
        self.needs_initial_reset = False
        return episodes

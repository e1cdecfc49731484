"""Installed packages known to break envs quietly, named with the fix before a run starts.

Env packages bring their own requirements, and pip installs them beside rlplat's without a word:
flappy-bird-gymnasium asks for ``pygame``, which overwrites the ``pygame/`` folder of the
``pygame-ce`` that PettingZoo's suites need (so ``import pygame`` gives whichever came last);
tetris-gymnasium asks for ``opencv-python`` beside rlplat's ``opencv-python-headless``; a
MuJoCo downgraded in place leaves the newer ``mujoco-core`` files in the same folder; and
gymnasium-robotics' Fetch and Hand envs fail a bare assert under MuJoCo 3.12 and newer.
"""

from __future__ import annotations

import functools
from importlib import metadata

from packaging.version import Version

# The last MuJoCo under which gymnasium-robotics' joint asserts hold (mujoco_utils.py:142).
ROBOTICS_MUJOCO_BELOW = Version("3.12")


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def package_problems() -> tuple[str, ...]:
    """One line per clash among the installed distributions, each with its fix."""
    problems = []
    pygame, pygame_ce = _version("pygame"), _version("pygame-ce")
    if pygame and pygame_ce:
        problems.append(
            f"pygame {pygame} and pygame-ce {pygame_ce} are both installed and overwrite each "
            "other's files in pygame/ (an env package asked for pygame: flappy-bird-gymnasium "
            "does); rendering may fail or mix versions. Fix: pip uninstall -y pygame pygame-ce "
            "&& pip install pygame-ce (PettingZoo needs pygame-ce; envs written for pygame run "
            "on it)"
        )
    opencv, headless = _version("opencv-python"), _version("opencv-python-headless")
    if opencv and headless:
        problems.append(
            f"opencv-python {opencv} and opencv-python-headless {headless} are both installed "
            "and overwrite each other's cv2/ (an env package asked for opencv-python: "
            "tetris-gymnasium does). Fix: pip uninstall -y opencv-python opencv-python-headless "
            "&& pip install opencv-python-headless (or opencv-python alone, for windows)"
        )
    mujoco, core = _version("mujoco"), _version("mujoco-core")
    if mujoco and core and core != mujoco:
        problems.append(
            f"mujoco {mujoco} sits beside mujoco-core {core}, whose files share the mujoco/ "
            "folder (a MuJoCo downgraded in place). Fix: pip uninstall -y mujoco mujoco-core "
            f"mujoco-studio mujoco-studio-wasm && pip install 'mujoco=={mujoco}'"
        )
    robotics = _version("gymnasium-robotics")
    if robotics and mujoco and Version(mujoco) >= ROBOTICS_MUJOCO_BELOW:
        problems.append(
            f"gymnasium-robotics {robotics} fails to build its Fetch and Hand envs under mujoco "
            f"{mujoco} (an empty AssertionError at gymnasium_robotics/utils/mujoco_utils.py:142: "
            f"MuJoCo {ROBOTICS_MUJOCO_BELOW} changed its joint-type enums). Fix: pip uninstall -y "
            f"mujoco mujoco-core mujoco-studio mujoco-studio-wasm && pip install "
            f"'mujoco<{ROBOTICS_MUJOCO_BELOW}' (rlplat's mujoco extra asks for that)"
        )
    return tuple(problems)

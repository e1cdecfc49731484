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
# Distributions that install the same package folder: (what an env package asks for, what rlplat
# installs, the folder, an env package that asks, the install that fixes it).
SAME_FOLDER = (
    (
        "pygame",
        "pygame-ce",
        "pygame/",
        "flappy-bird-gymnasium",
        "pip install pygame-ce (PettingZoo needs pygame-ce; envs written for pygame run on it)",
    ),
    (
        "opencv-python",
        "opencv-python-headless",
        "cv2/",
        "tetris-gymnasium",
        "pip install opencv-python-headless (or opencv-python alone, for windows)",
    ),
)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def package_problems() -> tuple[str, ...]:
    """One line per clash among the installed distributions, each with its fix."""
    problems = []
    for asked, ours, folder, asker, fix in SAME_FOLDER:
        asked_version, our_version = _version(asked), _version(ours)
        if asked_version and our_version:
            problems.append(
                f"{asked} {asked_version} and {ours} {our_version} are both installed and "
                f"overwrite each other's files in {folder} (an env package asked for {asked}: "
                f"{asker} does). Fix: pip uninstall -y {asked} {ours} && {fix}"
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

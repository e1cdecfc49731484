"""Headless MuJoCo rendering: the backend rlplat picks, and the paragraph when there is none."""

from __future__ import annotations

import ctypes.util
import os

import pytest

from rlplat.environments import opengl


def _raised_in(filename: str, exc: Exception) -> Exception:
    """``exc`` raised from code that claims to live in ``filename`` (as PyOpenGL's would)."""
    try:
        exec(compile("raise exc", filename, "exec"), {"exc": exc})
    except Exception as raised:  # noqa: BLE001
        return raised
    raise AssertionError("nothing raised")


PYOPENGL_FAILURE = _raised_in(
    os.path.join("site-packages", "OpenGL", "platform", "osmesa.py"),
    AttributeError("'NoneType' object has no attribute 'glGetError'"),
)


def test_a_machine_without_egl_or_osmesa_is_told_what_to_install(monkeypatch):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    assert opengl.headless_gl() is None
    message = opengl.opengl_failure(PYOPENGL_FAILURE)
    assert "MUJOCO_GL=unset" in message
    assert "apt install libegl1 libegl-mesa0" in message and "libosmesa6" in message


@pytest.mark.parametrize(("found", "backend"), [({"EGL", "OSMesa"}, "egl"), ({"OSMesa"}, "osmesa")])
def test_egl_is_preferred_then_osmesa(monkeypatch, found, backend):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: name if name in found else None)
    assert opengl.headless_gl() == backend
    monkeypatch.setenv("MUJOCO_GL", "glfw")
    assert f"set MUJOCO_GL={backend}" in opengl.opengl_failure(PYOPENGL_FAILURE)


def test_a_backend_whose_library_loads_but_fails_is_named(monkeypatch):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: name if name == "EGL" else None)
    monkeypatch.setenv("MUJOCO_GL", "egl")
    message = opengl.opengl_failure(PYOPENGL_FAILURE)
    assert "the egl library loads but made no context" in message
    assert "libegl-mesa0" in message and "set MUJOCO_GL=egl" not in message


class _NoOpenGL:
    """What a MuJoCo env does on a machine without OpenGL: it builds, and its first frame
    fails (Gymnasium makes the context then)."""

    metadata: dict = {}

    def reset(self, seed=None):
        return 0, {}

    def render(self):
        raise RuntimeError("No OpenGL backend could be imported. Attempting to create a context.")


class _Actor:
    multi_agent = False

    def reset(self, env, observation, info, seed):
        pass


def test_the_first_frame_without_opengl_is_a_user_error(monkeypatch):
    from rlplat.errors import UserError
    from rlplat.policy.rollout import run_episode

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pytest.raises(UserError, match="cannot render the environment: MuJoCo could not"):
        run_episode(_Actor(), _NoOpenGL(), seed=0, explore=False, capture_frames=True)


def test_other_env_failures_are_not_blamed_on_opengl(monkeypatch):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    assert opengl.opengl_failure(ValueError("bad kwargs")) is None

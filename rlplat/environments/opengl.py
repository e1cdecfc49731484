"""Which OpenGL backend MuJoCo (or pyglet) renders with off-screen, and a clear error when there
is none.

MuJoCo picks its backend from ``MUJOCO_GL`` once, when it is imported; unset, it tries a window
system (GLFW), which fails on a machine without a display. rlplat sets it, unless the user did,
to the first headless backend whose library this machine has.
"""

from __future__ import annotations

import ctypes.util
import os
import traceback

# MuJoCo's headless backends (their MUJOCO_GL values), with the library each loads.
HEADLESS_GL = (("egl", "EGL"), ("osmesa", "OSMesa"))
_GL_CODE = (
    f"{os.sep}OpenGL{os.sep}",
    f"mujoco{os.sep}egl",
    f"mujoco{os.sep}osmesa",
    f"mujoco{os.sep}glfw",
    "mujoco_rendering",
)


def headless_gl() -> str | None:
    """The first headless OpenGL backend MuJoCo can load here (EGL, then OSMesa), if any."""
    for backend, library in HEADLESS_GL:
        if ctypes.util.find_library(library):
            return backend
    return None


def headless_pyglet() -> None:
    """Make pyglet (the renderer of Level-Based Foraging and Multi-Robot Warehouse) draw
    off-screen through EGL when there is no display; it must be set before pyglet opens a
    window, which those envs do on their first ``render``."""
    if not os.environ.get("DISPLAY"):
        import pyglet  # noqa: PLC0415 - only envs that render with pyglet need it

        pyglet.options["headless"] = True


def opengl_failure(exc: BaseException) -> str | None:
    """What to install, when ``exc`` came from MuJoCo's (or PyOpenGL's) OpenGL set-up; else
    None."""
    frames = traceback.extract_tb(exc.__traceback__)
    text = f"{exc}"
    if not any(part in frame.filename for frame in frames for part in _GL_CODE) and (
        "OpenGL" not in text
    ):
        return None
    chosen = os.environ.get("MUJOCO_GL")
    found = [backend for backend, library in HEADLESS_GL if ctypes.util.find_library(library)]
    others = [backend for backend in found if backend != chosen]
    if others:
        advice = f"this machine has {' and '.join(found)}: set MUJOCO_GL={others[0]}."
    elif found:  # the library is there (perhaps only its dispatch stub) but made no context
        advice = (
            f"the {chosen} library loads but made no context: install a driver for it "
            "(Debian/Ubuntu: `apt install libegl-mesa0` for Mesa's EGL, which renders on the "
            "CPU without a GPU) or OSMesa (`apt install libosmesa6`)."
        )
    else:
        advice = (
            "neither library is installed here. Install one (Debian/Ubuntu: `apt install "
            "libegl1 libegl-mesa0`, Mesa's EGL, which renders on the CPU without a GPU, or "
            "`apt install libosmesa6`), or set MUJOCO_GL=glfw on a machine with a display."
        )
    return (
        f"MuJoCo could not render: no OpenGL backend loaded (MUJOCO_GL={chosen or 'unset'}; "
        f"{type(exc).__name__}: {str(exc).rstrip('.')}). It renders headless through EGL or "
        f"OSMesa; {advice}"
    )

"""Episode frames to files: GIF (Pillow) and MP4 (PyAV, H.264), headless.

Each frame gets a small "step / return" label. Besides being useful when watching, it keeps
consecutive frames distinct, so a GIF has exactly one frame per environment step (GIF writers
merge identical consecutive frames).
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import imageio.v3 as iio
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from rlplat.environments.opengl import headless_gl

VIDEO_FORMATS = ("gif", "mp4")
RENDER_CHOICES = ("gif", "mp4", "ansi", "human")
GIF_MAX_FPS = 50  # GIF delays are in 1/100 s and most viewers slow down anything under 2/100 s
DEFAULT_FPS = 30


def render_mode_for(render: str) -> str:
    """The Gymnasium ``render_mode`` an output format needs."""
    return "rgb_array" if render in VIDEO_FORMATS else render


def run_headless(render: str | None) -> None:
    """No window and no sound device unless the user asked for ``human`` rendering; MuJoCo
    renders off-screen through a backend this machine has, unless ``MUJOCO_GL`` says which.
    (Set before MuJoCo is imported: it reads ``MUJOCO_GL`` once.)"""
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    if render != "human":
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        backend = headless_gl()
        if backend is not None:
            os.environ.setdefault("MUJOCO_GL", backend)


def has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def frame_rate(metadata: dict, video_format: str) -> float:
    """The environment's own ``render_fps``, capped for GIF."""
    fps = float(metadata.get("render_fps") or DEFAULT_FPS)
    return min(fps, GIF_MAX_FPS) if video_format == "gif" else fps


def label_frames(frames: Sequence[np.ndarray], returns_before: Sequence[float]) -> list[np.ndarray]:
    """Draw ``step t  return R`` into the top-left corner of each frame."""
    labelled = []
    size = max(10, min(frames[0].shape[:2]) // 28) if frames else 10
    font = ImageFont.load_default(size=size)
    for step, (frame, ret) in enumerate(zip(frames, returns_before, strict=True)):
        image = Image.fromarray(np.ascontiguousarray(frame[..., :3], dtype=np.uint8))
        draw = ImageDraw.Draw(image)
        text = f"step {step}  return {ret:.2f}"
        left, top, right, bottom = draw.textbbox((4, 4), text, font=font)
        draw.rectangle((left - 2, top - 2, right + 2, bottom + 2), fill=(255, 255, 255))
        draw.text((4, 4), text, fill=(0, 0, 0), font=font)
        labelled.append(np.asarray(image))
    return labelled


def gif_bytes(frames: Sequence[np.ndarray], fps: float, max_width: int | None = None) -> bytes:
    """Encode frames as a looping GIF; ``max_width`` shrinks large frames (for TensorBoard)."""
    images = []
    for frame in frames:
        image = Image.fromarray(frame)
        if max_width and image.width > max_width:
            height = round(image.height * max_width / image.width)
            image = image.resize((max_width, height), Image.Resampling.BILINEAR)
        # Fast octree quantisation: about ten times faster than Pillow's default for GIF.
        images.append(image.quantize(colors=256, method=Image.Quantize.FASTOCTREE))
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=round(1000 / fps),
        loop=0,
    )
    return buffer.getvalue()


def write_video(frames: Sequence[np.ndarray], path: Path, fps: float) -> None:
    """Write ``frames`` to ``path`` (.gif or .mp4); the file must not exist yet."""
    if path.suffix == ".gif":
        data = gif_bytes(frames, fps)
        with open(path, "xb") as handle:
            handle.write(data)
        return

    # H.264 with yuv420p needs even dimensions: pad by one row/column where needed.
    height, width = frames[0].shape[:2]
    pad = ((0, height % 2), (0, width % 2), (0, 0))
    even = (
        np.stack([np.pad(f, pad, mode="edge") for f in frames])
        if any(pad[0] + pad[1])
        else (np.stack(frames))
    )
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        iio.imwrite(tmp, even, plugin="pyav", codec="libx264", fps=fps)
        os.link(tmp, path)  # fails if path appeared meanwhile: never overwrite
    finally:
        tmp.unlink(missing_ok=True)

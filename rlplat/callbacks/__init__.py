"""Tune callbacks of a run: progress, interrupts, logs, TensorBoard, videos, checkpoints and
search tables."""

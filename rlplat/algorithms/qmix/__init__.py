"""QMIX, VDN and IQL (``training.mixer``) for cooperative multi-agent teams."""

from rlplat.algorithms.qmix.qmix import QMIX, QMIXConfig

__all__ = ["QMIX", "QMIXConfig"]

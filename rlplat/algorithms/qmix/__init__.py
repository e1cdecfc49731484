"""QMIX, VDN and IQL (``training.mixer``) for cooperative multi-agent teams."""

from rlplat.algorithms.qmix.algorithm import QMIX
from rlplat.algorithms.qmix.config import QMIXConfig

__all__ = ["QMIX", "QMIXConfig"]

"""Datasets of recorded experience for offline training (see ``dataset.py``)."""

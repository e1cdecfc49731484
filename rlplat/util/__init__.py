"""Helpers that know nothing of experiments: atomic writes, new file names, imports by path."""

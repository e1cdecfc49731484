"""Helpers with no knowledge of experiments: atomic file writes, free file names, imports by path."""

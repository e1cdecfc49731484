"""Environments as experiments name them: Gymnasium, PettingZoo, wrappers, team view, connectors."""

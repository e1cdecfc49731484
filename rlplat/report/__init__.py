"""Results across runs and seeds: ``rlplat report`` (aggregates with bootstrap intervals,
probability of improvement, learning curves) and ``rlplat runs`` (what is under checkpoints/)."""

"""rlplat's fast paths, reached through the interfaces RLlib publishes for them.

``learner``: the torch learner every algorithm rlplat registers trains with (minibatches cut once
per epoch, one fused gradient clip and finiteness check, trained-steps counters once per update,
``training.optimizer``, the learner connector's state in checkpoints); ``minibatches``: its
minibatch cutting; ``optimizers``: the torch optimizers ``training.optimizer`` names;
``stacked``: N seeds' networks along a leading axis, trained without anything flowing between
them (issue 104's stacked seeds).
"""

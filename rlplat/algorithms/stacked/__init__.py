"""Stacked seeds (issue 104): N seeds of one experiment trained as one model along a leading
seed axis (``rlplat.engine.stacked``), sampling through ``runner.StackedEnvRunner``; one
algorithm per file (``ppo``, ``pqn``, ``sac``, ``td3``, ``crossq``, ``dqn``), what their
learners share in ``learning`` (and ``offpolicy``)."""

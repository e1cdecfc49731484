"""A trained policy without Ray: restore, roll out, render, evaluate (``rlplat eval``)."""

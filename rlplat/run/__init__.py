"""The run stage: launch and resume (one trial in rlplat's own loop, searches and seeds through
Ray Tune), the trainable, the run directory and its storage, the summary and exit codes."""

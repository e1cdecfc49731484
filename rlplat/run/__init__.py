"""The run stage: launch and resume through Ray Tune, the trainable, the run directory and its
storage, the summary and exit codes."""

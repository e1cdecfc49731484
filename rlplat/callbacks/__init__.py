"""What watches a run: observers of its trials (progress, TensorBoard, diagnoses, videos,
trackers, the training clock), and the Tune callbacks of a run on Tune (interrupts, history,
checkpoints, search tables)."""

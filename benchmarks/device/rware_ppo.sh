#!/usr/bin/env bash
# experiments/marl/rware_ppo.yaml on the lent 16-core GPU machine (issue 69): the file's training
# settings, with its env runners spread over the machine's cores and the learner on the GPU,
# stopped after SECONDS_ of training. The run directory comes back as $OUT/rware_ppo_run.tar.gz;
# FROM=<a checkpoint of it> starts the next loan from its weights and optimizer state.
#
#   RUNNERS=14 SECONDS_=480 bash benchmarks/device/rware_ppo.sh
#
# The machine has torch but no Ray or env packages: they travel as cp312 wheels in .whl (ignored
# by git, carried): ray 2.60.0 without ray/jars, ray/llm, ray/serve and ray/dashboard/client,
# gymnasium, pettingzoo, supersuit, tinyscaler, pygame-ce (without its docs, tests, examples),
# rware, dm-tree, lz4, ormsgpack, tensorboardX, jsonschema and its deps, pydantic and its deps,
# ruamel.yaml. NO_WHEELS=1 runs it on a machine that has them installed.
set -u
RUNNERS=${RUNNERS:-14}
SECONDS_=${SECONDS_:-480}
GPUS=${GPUS:-1}
OUT=${OUT:-/tmp/out}
RUNS=${RUNS:-/tmp/runs}
. benchmarks/device/wheels.sh
nproc; nvidia-smi -L 2>/dev/null
python3 -m rlplat.cli train experiments/marl/rware_ppo.yaml \
    resources.env_runners.count="$RUNNERS" resources.learners.gpus="$GPUS" \
    stop.time_s="$SECONDS_" stop.env_steps=1000000000 output_dir="$RUNS" --timings \
    ${FROM:+--from "$FROM" init.optimizer=true}
rc=$?
mkdir -p "$OUT"
tar -czf "$OUT/rware_ppo_run.tar.gz" -C "$RUNS" . && ls -la "$OUT"
exit $rc

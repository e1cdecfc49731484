#!/usr/bin/env bash
# Tic-tac-toe self-play variants side by side on the lent 16-core machine (issue 70): each
# `rlplat train experiments/tictactoe_selfplay.yaml` with one env runner (two cores per run),
# stopped after SECONDS_ of training or 300k env steps. The run directories come back as
# $OUT/tictactoe_<variant>.tar.gz; the head-to-head games are played afterwards with rlplat eval.
# Wheels as benchmarks/device/rware_ppo.sh says.
set -u
SECONDS_=${SECONDS_:-150}
OUT=${OUT:-/tmp/out}
RUNS=${RUNS:-/tmp/runs}
. benchmarks/device/wheels.sh
pool=multi_agent.self_play.pool
declare -A VARIANTS=(
    [random0.4]="$pool.random=0.4"
    [random0.4_net128]="$pool.random=0.4 rl_module.model_config.fcnet_hiddens=[128,128]"
    [random0.2]="$pool.random=0.2"
    [random0.4_keep_first]="$pool.random=0.4 $pool.keep_first=true"
)
core=0
for name in "${!VARIANTS[@]}"; do
    for seed in 0 1; do
        # shellcheck disable=SC2086
        taskset -c "$core,$((core + 1))" python3 -m rlplat.cli train \
            experiments/tictactoe_selfplay.yaml ${VARIANTS[$name]} --seed "$seed" \
            resources.env_runners.count=1 stop.time_s="$SECONDS_" stop.env_steps=300000 \
            output_dir="$RUNS/${name}_seed$seed" > "$RUNS.${name}_seed$seed.log" 2>&1 &
        core=$(( (core + 2) % $(nproc) ))
    done
done
wait
mkdir -p "$OUT"
tail -n 3 "$RUNS".*.log
for name in "${!VARIANTS[@]}"; do  # one file per variant: each file that comes back is <= 16 MB
    tar -czf "$OUT/tictactoe_$name.tar.gz" -C "$RUNS" "${name}_seed0" "${name}_seed1"
done
ls -la "$OUT"

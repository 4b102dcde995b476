#!/usr/bin/env bash
set -u
root=$PWD; cd $(mktemp -d)
for pass in 1 2; do
for cfg in "base:" "gather:FP8OPS_TUNE_GATHER=1" "t256:FP8OPS_TUNE_SMALL_THREADS=256" "u2mn:FP8OPS_TUNE_UNROLL=2 FP8OPS_TUNE_MNVEC=1"; do
  name=${cfg%%:*}; envs=${cfg#*:}
  env $envs PYTHONPATH=$root/.tune-base python3 $root/.exp/packed_probe.py $name | tee -a $OUT/packed-probe.jsonl
done
done

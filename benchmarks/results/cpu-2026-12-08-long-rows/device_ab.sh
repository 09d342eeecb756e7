#!/bin/bash
# On the GPU machine, from the repository root of main (carry .device/wheels and .device/setup.sh):
#   bash benchmarks/results/cpu-2026-12-08-long-rows/device_ab.sh
# 1. Cora's launch-shape sweep on the real graph (cora_sweep.sh); 2. Cora's training step on main's Triton backend
# and with long_row_block.patch applied, alternated twice (old, new, old, new); 3. the Triton, capture and Planetoid
# GPU suites with the patch applied (it stays applied: `git apply -R` it to go back).
set -u
HERE=benchmarks/results/cpu-2026-12-08-long-rows
OUT=${OUT:-out}
mkdir -p "$OUT"
source .device/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
T00=$(date +%s)
timeout 160 bash $HERE/cora_sweep.sh; echo "cora sweep seconds: $(( $(date +%s) - T00 ))"
for r in 1 2; do
  for tree in old new; do
    [ $tree = new ] && git apply $HERE/long_row_block.patch
    python3 benchmarks/bench_training.py --workloads cora --variants pyg-compiled-captured ours-captured \
      ours-compiled-captured --out "$OUT/cora_${tree}_$r.json" 2>&1 | grep -E "^\| " | tail -5
    [ $tree = new ] && [ $r = 1 ] && git apply -R $HERE/long_row_block.patch
  done
done
echo "a/b seconds: $(( $(date +%s) - T00 ))"
python3 tests/gpu/run_shards.py --shards 14 --timeout 150 --out "$OUT/t" -- tests/gpu/test_triton_gpu.py \
  tests/gpu/test_capture_gpu.py tests/gpu/test_planetoid_training_gpu.py -m "gpu and not gpu_alone" 2>&1 | tail -15
echo "total seconds: $(( $(date +%s) - T00 ))"

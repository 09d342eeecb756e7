#!/usr/bin/env bash
# Last call: the launch-cache fix on the GPU. carry: .device/wheels .device/setup.sh .devrun
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT/log.txt
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log | tee $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
t() { echo "== $* (at $SECONDS s)" | tee -a $L; }
timeout 130 python3 benchmarks/bench_accuracy.py --workloads cora citeseer --time-budget 75 --out $OUT/bench_accuracy.json \
  --md $OUT/bench_accuracy.md > $OUT/bench_accuracy.log 2>&1 &
ACC=$!
( cd .devrun/trees/6a6d161 && PYTHONPATH=$PWD python3 -c "import cudnn_gnn.backends.triton.launch as l; print(l.__file__)" > $OUT/old_tree_file.log 2>&1
  PYTHONPATH=$PWD timeout 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_planetoid_training_gpu.py -m gpu -k track --tb=line 2>&1 \
  | grep -E "passed|failed|^/|Error" | cut -c1-300 > $OUT/old_tree.log ) &
OLD=$!
t fixed tree: planetoid test
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_planetoid_training_gpu.py -m gpu --tb=short 2>&1 | grep -vE "^\s*$" | tail -15 | cut -c1-300 | tee $OUT/planetoid.log | tail -3 | tee -a $L
t head shapes test
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_triton_gpu.py -m gpu -k head_shapes --tb=short 2>&1 | grep -vE "^\s*$" | tail -12 | cut -c1-300 | tee $OUT/triton_gpu.log | tail -3 | tee -a $L
wait $OLD; t old tree 6a6d161; cat $OUT/old_tree_file.log $OUT/old_tree.log | tee -a $L
wait $ACC; t accuracy; tail -14 $OUT/bench_accuracy.log | cut -c1-250 | tee -a $L
t total

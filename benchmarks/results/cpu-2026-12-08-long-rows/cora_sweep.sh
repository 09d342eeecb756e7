#!/bin/bash
# Cora's two GAT layers (8 x 8, 1 x 7), float32, attention dropout 0.6: the forward and GAT's source pass by edges a
# block and warps, on the real graph with its self-loops (triton_tuning.py --dataset Cora). From the repository root.
OUT=${OUT:-out}
for hc in "8 8" "1 7"; do
  set -- $hc
  python3 benchmarks/investigations/triton_tuning.py --skip-host --dataset Cora --heads "$1" --channels "$2" \
    --dropout 0.6 --passes fwd,gat_src --dtypes fp32 --grid 4,8,16,32,64x1,2 --repeats 20 \
    --out "$OUT/cora_sweep_$1x$2.json" 2>&1 | grep -v Warning | tail -24
done

#!/usr/bin/env bash
# CiteSeer on CUDA: which part of train_planetoid's path. carry: .devrun
set -uo pipefail
export PYTHONUNBUFFERED=1
END=${END:-300}
L=$OUT/log.txt
R=$PWD
H=$R/.devrun/trees/6a6d161
cp -r $R/datasets/data $H/cudnn_gnn/datasets/ && cp -r $R/tests $R/pyproject.toml $H/
nvidia-smi --query-gpu=name --format=csv,noheader | tee $L
t() { echo "== $* (at $SECONDS s)" | tee -a $L; }
mkdir -p $OUT/v
cd $H
i=0
for DATA in lib mine; do for GRAPH in csc raw; do for EVAL in 1 0; do for MODEL in lib mine; do i=$((i+1))
  DATA=$DATA GRAPH=$GRAPH EVAL=$EVAL MODEL=$MODEL PYTHONPATH=$H timeout 200 python3 $R/.devrun/cs2.py 0,1 150 > $OUT/v/$i.log 2>&1 &
done; done; done; done
DATA=lib GRAPH=csc EVAL=1 MODEL=lib BACKEND=reference PYTHONPATH=$H timeout 200 python3 $R/.devrun/cs2.py 0,1 150 > $OUT/v/ref.log 2>&1 &
for cap in capture no-capture; do for be in triton reference; do
  PYTHONPATH=$H timeout 200 python3 -m cudnn_gnn train --dataset CiteSeer --device cuda --backend $be --$cap --epochs 60 --patience 1000 \
    --log-every 20 --json $OUT/v/cli_${be}_${cap}.json > $OUT/v/cli_${be}_${cap}.log 2>&1 &
done; done
t gpu test
PYTHONPATH=$H timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_planetoid_training_gpu.py -m gpu --tb=short 2>&1 \
  | grep -vE "^\s*$" | tail -30 | cut -c1-600 > $OUT/gputest.log; tail -12 $OUT/gputest.log | tee -a $L
t wait
wait
for f in $OUT/v/*.log; do echo "-- $(basename $f)"; grep -E "RESULT|Error|epoch +(1|20|40|60)/" $f | tail -4 | cut -c1-700; done | tee -a $L
t total

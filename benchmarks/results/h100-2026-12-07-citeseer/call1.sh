#!/usr/bin/env bash
# CiteSeer on CUDA: which tree, which path. carry: .device/wheels .device/setup.sh .devrun
set -uo pipefail
export PYTHONUNBUFFERED=1
END=${END:-560}
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L
t() { echo "== $* (at $SECONDS s)" | tee -a $L; }
R=$PWD
mkdir -p $OUT/bis
# 1. bisect: every tree, eager 2 seeds x 200 steps then captured 1 seed x 30 steps, all trees at once
for tr in .devrun/trees/*; do c=$(basename $tr)
  ( cd /tmp && CS_NPZ=$R/datasets/data/planetoid/citeseer.npz PYTHONPATH=$R/$tr timeout 400 python3 $R/.devrun/cs.py eager 0,1 200 > $OUT/bis/${c}_eager.log 2>&1
    CS_NPZ=$R/datasets/data/planetoid/citeseer.npz PYTHONPATH=$R/$tr timeout 200 python3 $R/.devrun/cs.py captured 0 30 > $OUT/bis/${c}_captured.log 2>&1 ) &
done
H=$R/.devrun/trees/6a6d161
run_head() { ( cd /tmp && CS_NPZ=$R/datasets/data/planetoid/citeseer.npz PYTHONPATH=$H "$@" ); }
run_head timeout 300 python3 $R/.devrun/cs.py ref 0,1 200 > $OUT/bis/head_ref.log 2>&1 &
ATT_P=0 run_head timeout 300 python3 $R/.devrun/cs.py eager 0,1 200 > $OUT/bis/head_eager_attp0.log 2>&1 &
run_head timeout 300 python3 $R/.devrun/cs.py eval_cmp 0 200 > $OUT/bis/head_evalcmp.log 2>&1 &
t gpu test
( cp -r $R/tests $R/pyproject.toml $H/ && cd $H && PYTHONPATH=$H timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_planetoid_training_gpu.py -m gpu --tb=short -rA 2>&1 | grep -vE "^\s*$" | tail -40 | cut -c1-400 ) > $OUT/gputest.log; cat $OUT/gputest.log | tail -15 | tee -a $L
t wait bisect
wait
for f in $OUT/bis/*.log; do echo "-- $(basename $f)"; grep -E "RESULT|Error|error" $f | tail -3 | cut -c1-1500; done | tee -a $L
t sanitizer
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "compute-sanitizer: $CS" | tee -a $L
if [ -n "$CS" ] && [ $((END - SECONDS)) -gt 60 ]; then
  run_head timeout $(( (END - SECONDS) * 2 / 3 )) $CS --tool memcheck --print-limit 20 python3 $R/.devrun/cs.py eager 0 3 > $OUT/memcheck.log 2>&1
  tail -30 $OUT/memcheck.log | cut -c1-300 | tee -a $L
  [ $((END - SECONDS)) -gt 40 ] && run_head timeout $((END - SECONDS - 10)) $CS --tool racecheck --print-limit 20 python3 $R/.devrun/cs.py eager 0 2 > $OUT/racecheck.log 2>&1
  tail -20 $OUT/racecheck.log | cut -c1-300 | tee -a $L
fi
t total

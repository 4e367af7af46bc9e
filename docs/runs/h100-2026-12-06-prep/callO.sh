#!/bin/bash
# Session 42, call O: which of the four gdn_prep changes slows the walk beside prep: the bench (one sequence, 8k and
# 32k; 16 sequences at 8k) for the previous commit's binary (old), all four changes (new), and new with one of them
# undone each (nopair: W/U's halves one after the other; nomerge: L and Aqk in two passes; nodecay: g/beta read after
# the copies; olddiag: the diagonal inverse as before), twice; then the op, model and engine tests of new.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
for k in a b; do for f in old new nopair nomerge nodecay olddiag; do
  bin=$B/hypic_bench_kernels_$f; [ $f = new ] && bin=$B/hypic_bench_kernels
  timeout 60 $bin --only gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20 > $O/bench_${f}_$k.json 2>&1
  echo "$f $k: $(grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' $O/bench_${f}_$k.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //; s/"out\+state"/os/; s/"out\+state\+transfer"/T/; s/"out\+state, 16 sequences"/os16/; s/"out\+state\+transfer, 16 sequences"/T16/' | tr '\n' ' ')"
done; done
date +%T
TT=60 gtest cuda_gdn_chunked_test "" ""
gtest cuda_model_test "" ""
TT=200 gtest engine_model_test '*cuda*' ""
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o

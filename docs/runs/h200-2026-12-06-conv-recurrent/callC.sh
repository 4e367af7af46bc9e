#!/bin/bash
# Issue 12 goals 2 and 3, on the tree of commit 4df78c3 with callC_wu_frags.patch applied. Goal 2: -W's A fragments
# written by gdn_prep (HYPIC_CUDA_GDN_WU_FRAGS, the patch's default) against the walk's second warpgroup scaling them, op test under both and prep-first, interleaved rounds, fla in the
# same call. Goal 3: the decode step with the one-launch conv/split/recurrence as the default (batch 1 and the
# one-sequence graph), against HYPIC_CUDA_GDN_CONV_RECURRENT=0. Then the model, stitch and engine tests by default.
# Pack: TARGETS="hypic_bench_kernels cuda_gdn_chunked_test cuda_decode_ops_test hypic_bench_model engine_batch_model_test cuda_model_test engine_model_test cuda_stitch_ops_test" tools/bench/pack_gpu_binaries.sh build
# (examples/models/hypic-qa-long is left out of the tree sent, for room: engine_model_test's case of it cannot pass here)
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=120 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_OVERLAP=0 TT=120 gtest cuda_gdn_chunked_test "" "_prep_first"
if grep -q "^\[  PASSED  \]" $O/cuda_gdn_chunked_test.txt && ! grep -q "FAILED" $O/cuda_gdn_chunked_test.txt $O/cuda_gdn_chunked_test_prep_first.txt; then
  gdn_bench "1 2" "walk:HYPIC_CUDA_GDN_WU_FRAGS=0 frags:X=0" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
fi
date +%T
TT=90 gtest cuda_decode_ops_test "" ""
CFG="--config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192"
dec() {  # dec NAME ENV ARGS...: one bench run into $O/decode_NAME.json, its figures printed
  local n=$1 e=$2; shift 2
  env $(tr , " " <<< "$e") timeout 100 $B/hypic_bench_model $CFG "$@" > $O/decode_$n.json 2>$O/decode_$n.err
  echo "$n: $(grep -oE '"copy_tb_per_s": [0-9.]+' $O/decode_$n.json) $(grep -oE '"(decode|graph_drawn)": \{[^}]*' $O/decode_$n.json | grep -oE '"(decode|graph_drawn)"|"(ms_per_token|ms_per_step|tokens_per_s|fraction_of_peak|fraction_of_copy)": [0-9.]+' | tr '\n' ' ')"
  tail -1 $O/decode_$n.err
}
for r in 1 2; do for f in two:HYPIC_CUDA_GDN_CONV_RECURRENT=0 default:X=0; do dec ${f%%:*}_$r ${f#*:} --decode 64 --batch 1 --batch-steps 24; done; done
date +%T
TT=120 gtest cuda_model_test "" ""
TT=90 gtest engine_batch_model_test "" ""
TT=100 gtest cuda_stitch_ops_test "" ""
date +%T
FT=120 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
date +%T
TT=200 gtest engine_model_test "*cuda*:*Cuda*:*CUDA*" ""
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o

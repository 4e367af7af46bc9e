#!/bin/bash
# Issue 12 on an H200 at main (f92303e: the forty-ninth and fiftieth sessions' decode defaults, measured on H100s
# only until now): the batch-1 serving step, batch 1/8/32 (batch 32 needs more than an H100's 80 GB), the step's
# timeline, the GDN prefill with fla 0.6.0 in the same call, the RAG TTFT, the attention prefill with torch SDPA in
# the same call; four opt-in forms of the step against main's, interleaved, alone and together (the one-trip split
# combine HYPIC_CUDA_COMBINE_ONE_TRIP=1, the norm kernel's angles before its wait HYPIC_CUDA_QK_PRE_ANGLES=1, the
# GDN recurrence triggering at its start HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1, the norms and append in the attention
# walk HYPIC_CUDA_DECODE_ATTN_FOLD=1); then the GPU tests (op harness, attention, GDN, stitch, model, engine).
# Pack: tools/bench/pack_gpu_binaries.sh build   (the full set)
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $O/device.txt
CFG="--config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192"
dec() {  # dec NAME ENV ARGS...: one bench run into $O/decode_NAME.json, its figures printed
  local n=$1 e=$2; shift 2
  env $(tr , " " <<< "$e") timeout 150 $B/hypic_bench_model $CFG "$@" > $O/decode_$n.json 2>$O/decode_$n.err
  echo "$n: $(grep -oE '"copy_tb_per_s": [0-9.]+' $O/decode_$n.json) $(grep -oE '"(decode|graph_drawn)": \{[^}]*' $O/decode_$n.json | grep -oE '"(decode|graph_drawn)"|"(ms_per_token|ms_per_step|tokens_per_s|fraction_of_copy)": [0-9.]+' | tr '\n' ' ')"
  tail -1 $O/decode_$n.err
}
for r in 1 2; do for f in main:X=1 trip:HYPIC_CUDA_COMBINE_ONE_TRIP=1 qkpre:HYPIC_CUDA_QK_PRE_ANGLES=1 recf:HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1 fold:HYPIC_CUDA_DECODE_ATTN_FOLD=1 all:HYPIC_CUDA_COMBINE_ONE_TRIP=1,HYPIC_CUDA_QK_PRE_ANGLES=1,HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1,HYPIC_CUDA_DECODE_ATTN_FOLD=1; do dec ${f%%:*}_$r ${f#*:} --decode 64 --batch 1 --batch-steps 24; done; done
dec batches X=1 --decode 0 --batch 1,8,32 --batch-steps 24
date +%T
mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
for f in main:X=1 all:HYPIC_CUDA_COMBINE_ONE_TRIP=1,HYPIC_CUDA_QK_PRE_ANGLES=1,HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1,HYPIC_CUDA_DECODE_ATTN_FOLD=1; do
  n=${f%%:*}
  env $(tr , " " <<< "${f#*:}") CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
    HYPIC_TRACE_OUT=$O/step_$n.trace timeout 90 $B/hypic_bench_model $CFG --decode 64 --batch 1 --batch-steps 24 > /dev/null 2>&1
  python3 tools/bench/kernel_gaps.py $O/step_$n.trace --graph-step 2 --list 0:60 > $O/decode_gaps_$n.txt 2>&1
  echo "timeline $n:"; sed -n '/kernels by name/,/^$/p' $O/decode_gaps_$n.txt | head -16; grep -E "window" $O/decode_gaps_$n.txt; rm -f $O/step_$n.trace
done
date +%T
gdn_bench "1 2" "main:X=0" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
FT=150 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
date +%T
timeout 200 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/h200_ttft.json 2> $O/h200_ttft.err
grep -oE '"mode": "[a-z]+", "ttft_ms": \{[^}]*' $O/h200_ttft.json
date +%T
timeout 60 $B/hypic_bench_kernels --only attention --tokens 8192,32768 --iters 20 > $O/bench_attention.json 2>&1
grep -oE '"tokens": [0-9]+[^}]*"ms": [0-9.]+' $O/bench_attention.json | head -8
timeout 120 python3 tools/bench/bench_peers.py --tokens 8192,32768 --iters 20 > $O/bench_peers_attention.json 2>&1
grep -E '"ms"|backend|error' $O/bench_peers_attention.json | paste - - | sed -E 's/ +/ /g' | head -12
date +%T
for t in cuda_decode_ops_test cuda_backend_ops_test cuda_gdn_chunked_test cuda_stitch_ops_test cuda_attention_prefill_test; do
  [ $(left 560) -gt 60 ] && TT=150 gtest $t "" ""
done
[ $(left 560) -gt 60 ] && TT=150 gtest cuda_model_test "" ""
[ $(left 560) -gt 60 ] && TT=150 gtest engine_batch_model_test "" ""
[ $(left 560) -gt 60 ] && HYPIC_CUDA_COMBINE_ONE_TRIP=1 HYPIC_CUDA_QK_PRE_ANGLES=1 HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1 HYPIC_CUDA_DECODE_ATTN_FOLD=1 TT=150 gtest engine_batch_model_test "" _all
[ $(left 570) -gt 60 ] && TT=$(left 575) gtest engine_model_test "*cuda*" ""
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o

#!/bin/bash
# hypic_bench_model when a batch does not fit: --batch 1,8,32 on an 80 GB card (batch 32 out of memory) must end
# the list with an "error" entry, print whole JSON and exit 1.
# Pack: TARGETS="hypic_bench_model" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $O/device.txt
timeout 120 $B/hypic_bench_model --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 \
  --decode 0 --batch 1,8,32 --batch-steps 24 > $O/decode.json 2> $O/decode.err
echo "exit $?"; cat $O/decode.err | tail -3
python3 -c "import json,sys; d=json.load(open('$O/decode.json')); print('valid JSON;', [(b['batch'], b.get('graph_drawn',{}).get('ms_per_step'), b.get('graph_drawn',{}).get('fraction_of_copy'), b.get('error','')[:60]) for b in d['batched_decode']], 'copy', d['copy_tb_per_s'])"
tar czf $OUT/logs.tgz -C /tmp o

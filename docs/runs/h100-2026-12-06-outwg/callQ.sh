#!/bin/bash
# Prepared in the forty-second session, not run (no device time left). Why is the GDN walk slower beside prep (~2.3 us
# a chunk at 8k) than alone (~1.6), and slower still beside a faster prep? One candidate is the SM clock: beside prep
# all 132 SMs are busy. This samples the SM clock and the power every 5 ms (nvidia-smi) while the 8k and 32k launches
# repeat for about a second each, prep beside the walk (default) against prep before it (HYPIC_CUDA_GDN_OVERLAP=0).
# On an H200 it also times the GDN table, RAG TTFT and decode (the figures issue 12 asks for on that card).
# Pack: TARGETS="cuda_gdn_chunked_test hypic_bench_kernels hypic_bench_ttft hypic_bench_model" tools/bench/pack_gpu_binaries.sh build
# (keep .gpubin/trace.tar.xz, the CUPTI trace library, which the pack also writes).
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
for tok in 8192 32768; do for f in beside:HYPIC_CUDA_GDN_OVERLAP=1 seq:HYPIC_CUDA_GDN_OVERLAP=0; do
  n=${f%%:*}; it=$((3000 * 8192 / tok))
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 5 > $O/smi_${n}_$tok.csv & SP=$!
  sleep 0.3
  env ${f#*:} timeout 60 $B/hypic_bench_kernels --only gdn --tokens $tok --iters $it > $O/bench_${n}_$tok.json 2>&1
  sleep 0.3; kill $SP
  # Samples drawn while the GPU was loaded (power above its idle draw + 100 W): their SM clock and power, median.
  python3 - "$O/smi_${n}_$tok.csv" "$n $tok" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 5]
p = [float(r[3]) for r in rows]
busy = [r for r in rows if float(r[3]) > min(p) + 100] or rows
print(sys.argv[2], "samples", len(busy), "sm MHz", statistics.median(float(r[1]) for r in busy),
      "W", statistics.median(float(r[3]) for r in busy))
PY
  grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' $O/bench_${n}_$tok.json | head -2
done; done
# Each kernel's own time on the GPU (CUPTI, concurrent kernels kept concurrent: .gpubin/trace.tar.xz) at 8k and 32k,
# one sequence: beside (does prep end well before the walk? then the walk's own pace beside prep is the bound), prep
# before the walk, and every chunk prepared before the walk starts but the walk still reading flags (LEAD=100: the
# beside form's walk without prep running beside it).
mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
for tok in 8192 32768; do for f in beside:HYPIC_CUDA_GDN_OVERLAP=1 seq:HYPIC_CUDA_GDN_OVERLAP=0 lead100:HYPIC_CUDA_GDN_OVERLAP_LEAD=100; do
  n=${f%%:*}_$tok
  env ${f#*:} CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
    HYPIC_TRACE_OUT=$O/gdn_$n.trace timeout 60 $B/hypic_bench_kernels --only gdn --tokens $tok --iters 20 > $O/bench_trace_$n.json 2>&1
  echo "$n:"; python3 - $O/gdn_$n.trace <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1], errors="replace"):
    f = line.rstrip("\n").split(";")
    name = ";".join(f[8:])
    if f[0] == "K" and "gdn" in name:
        d[(name[:60], f[6], f[7])].append((int(f[2]) - int(f[1])) / 1000)
for (name, grid, block), v in sorted(d.items()):
    print(f"  {name:60s} grid {grid:>10s} x {block:>4s} n {len(v):4d} median {statistics.median(v):8.1f} us")
PY
done; done
if grep -q H200 $O/device.txt; then
  TT=60 gtest cuda_gdn_chunked_test "" ""
  TT=200 gtest cuda_model_test "" ""
  timeout 90 $B/hypic_bench_kernels --only gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20 > $O/bench_h200.json 2>&1
  FT=100 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
  timeout 200 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/bench_ttft_rag.json 2>&1
  echo "ttft exit $?"
  timeout 150 $B/hypic_bench_model --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 --decode 64 --batch 1,8,32 --batch-steps 24 > $O/bench_model_decode.json 2>&1
  echo "model exit $?"
fi
kill $TP; tar czf $OUT/logs.tgz -C /tmp o

#!/usr/bin/env bash
# Long fuzzing runs of every target, several independent workers each (docs/reliability.md records the
# results). Each worker keeps its own scratch corpus, starts from the committed seeds, runs for SECONDS
# and prints libFuzzer's final stats; a crash, timeout, OOM or sanitizer report leaves its reproducer
# in OUTDIR/<target>/ and a non-zero status in the summary.
# Usage: tests/fuzz/run_long.sh BIN_DIR SECONDS OUTDIR [target=workers ...]
#   BIN_DIR holds the *_fuzz binaries (a clang -DHYPIC_FUZZ=ON build); default workers: 2 per target
#   (target=0 leaves a target out).
#   FUZZ_RESUME=DIR (optional): a folder with one subfolder per target (the OUTDIR/corpus/<target> of an
#   earlier run) whose inputs join the seeds, so a campaign can continue over several runs.
#   OUTDIR/corpus/<target> receives the union of the workers' corpora at the end.
set -uo pipefail
bin=${1:?usage: run_long.sh BIN_DIR SECONDS OUTDIR [target=workers ...]}
bin=$(cd "$bin" && pwd)  # the workers run in their own folders
secs=${2:?seconds}
out=${3:?outdir}
shift 3
src=$(cd "$(dirname "$0")" && pwd)
declare -A workers
for t in "$src"/*_fuzz.cc; do n=$(basename "$t" .cc); workers[$n]=2; done
for a in "$@"; do workers[${a%%=*}]=${a#*=}; done
mkdir -p "$out"
pids=()
for n in "${!workers[@]}"; do
  c=${n%_fuzz}
  for w in $(seq 1 "${workers[$n]}"); do
    d="$out/$n/w$w"
    mkdir -p "$d/corpus"
    (cd "$d" && ASAN_OPTIONS=detect_leaks=1 "$bin/$n" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -seed=$((1000 * w + 17 + ${FUZZ_SEED_OFFSET:-0})) -print_final_stats=1 -artifact_prefix="$d/" corpus \
       "$src/corpus/$c" ${FUZZ_RESUME:+$( [ -d "$FUZZ_RESUME/$c" ] && echo "$FUZZ_RESUME/$c")} \
       > log.txt 2>&1; echo $? > status) &
    pids+=($!)
  done
done
wait "${pids[@]}"
for n in "${!workers[@]}"; do
  [ "${workers[$n]}" -gt 0 ] || continue
  c=${n%_fuzz}
  mkdir -p "$out/corpus/$c"
  for d in "$out/$n"/w*; do cp -n "$d/corpus/"* "$out/corpus/$c/" 2>/dev/null; done
done
printf '%-24s %8s %14s %8s %10s %s\n' target workers executions exec/s corpus status
for n in $(printf '%s\n' "${!workers[@]}" | sort); do
  [ "${workers[$n]}" -gt 0 ] || continue  # target=0 on the command line: not run
  execs=0 rate=0 units=0 st=""
  for d in "$out/$n"/w*; do
    e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log.txt" | tail -1)
    r=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$d/log.txt" | tail -1)
    execs=$((execs + ${e:-0})); rate=$((rate + ${r:-0}))
    units=$((units + $(ls "$d/corpus" | wc -l)))
    st="$st$(cat "$d/status")"
  done
  printf '%-24s %8s %14s %8s %10s %s\n' "$n" "${workers[$n]}" "$execs" "$rate" "$units" "$st"
done

#!/usr/bin/env bash
# hypic_bench_ttft --case state (the composed state against full recompute, per layer) on the fixture
# models: at layer 0 hypic's composed linear state equals full recompute to fp32 precision (the seam
# gives the convolution its true context, the transfer operator carries the prefix), while naive
# composition (no T) and no seam (no conv context) are measurably off there; naive's first-token
# distribution is further from full than hypic's.
set -euo pipefail
bench="$HYPIC_BUILD_DIR/tools/hypic_bench_ttft"
[ -x "$bench" ] || { echo "FAIL: $bench is not built"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for m in qwen3_next_moe qwen3_5_dense; do
  "$bench" --model "$HYPIC_SOURCE_DIR/tests/fixtures/models/$m" --device cpu --case state --requests 3 --warmup 0 \
    --pool 12 --chunks-min 3 --chunks-max 5 --chunk-tokens 40 --system 30 --tools 40 --question 10 --quiet > "$tmp/$m.json"
  python3 - "$tmp/$m.json" "$m" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))["state"]
modes = {m["mode"]: m for m in rep["modes"]}
kinds = rep["layer_kinds"]
assert kinds[0] == "linear", kinds
h, n, s = (modes[k]["error_by_layer"] for k in ("hypic", "naive", "noseam"))
assert len(h) == len(kinds)
assert h[0] < 1e-5, ("hypic layer 0", h[0])
assert n[0] > 1e-2 and n[0] > 1000 * h[0], ("naive layer 0", n[0], h[0])
assert s[0] > 10 * h[0], ("noseam layer 0", s[0], h[0])
assert modes["hypic"]["first_token_kl"] < modes["naive"]["first_token_kl"], modes
assert all(m["block_hit_rate"] == 1.0 for m in modes.values()), modes
print("ok - %s: layer 0 error hypic %.2g, noseam %.2g, naive %.2g; KL hypic %.3g, naive %.3g" % (
    sys.argv[2], h[0], s[0], n[0], modes["hypic"]["first_token_kl"], modes["naive"]["first_token_kl"]))
PY
done

#!/usr/bin/env bash
# The generated headers are what their generators write now (an edit of one without the other fails here).
set -euo pipefail
: "${HYPIC_SOURCE_DIR:?repository root}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$HYPIC_SOURCE_DIR/tools/codegen/gen_wgmma_ss.py" --out "$tmp/wgmma_ss.cuh"
diff -u "$HYPIC_SOURCE_DIR/kernels/cuda/wgmma_ss.cuh" "$tmp/wgmma_ss.cuh"
echo "wgmma_ss.cuh matches its generator"

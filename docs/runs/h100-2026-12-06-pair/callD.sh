#!/bin/bash
# Session 40, call D: ../h100-2026-12-06-no-device/callC.sh (the thirty-ninth session's minimal call) with three
# rounds of the bench instead of two.
sed 's/for k in a b; do/for k in a b c; do/' docs/runs/h100-2026-12-06-no-device/callC.sh | bash

#!/usr/bin/env bash
# docs/getting_started.md, run exactly as written: its sh blocks in order in one shell, its files saved
# where a `<!-- file: NAME -->` line names them, starting in a view of the checkout (its build/ is this
# build) with HOME in a temporary folder. Then every line of its ```text output blocks must appear in
# what the commands printed. This installs the SDK and builds a program against it out of tree.
set -euo pipefail
doc="$HYPIC_SOURCE_DIR/docs/getting_started.md"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/checkout" "$tmp/home"
ln -s "$HYPIC_BUILD_DIR" "$tmp/checkout/build"
ln -s "$HYPIC_SOURCE_DIR/examples" "$tmp/checkout/examples"

# The doc as one script: sh blocks verbatim, file blocks as heredocs.
python3 - "$doc" "$tmp/script.sh" "$tmp/expected.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
script, expected, pending = ["set -euo pipefail"], [], None
for m in re.finditer(r"(<!-- file: (\S+) -->\n)?```(\w+)\n(.*?)```", text, re.S):
    name, lang, body = m.group(2), m.group(3), m.group(4)
    if name:
        assert "HYPIC_DOC_EOF" not in body
        script.append(f"cat > {name} <<'HYPIC_DOC_EOF'\n{body}HYPIC_DOC_EOF")
    elif lang == "sh":
        script.append(body)
    elif lang == "text":
        expected += [l for l in body.splitlines() if l.strip()]
assert len(script) > 5 and expected, "no commands or no expected output found"
open(sys.argv[2], "w").write("\n".join(script) + "\n")
open(sys.argv[3], "w").write("\n".join(expected) + "\n")
PY

cd "$tmp/checkout"
out=$(HOME="$tmp/home" bash "$tmp/script.sh" 2>"$tmp/stderr") || { cat "$tmp/stderr"; echo "FAIL: the doc's commands failed"; exit 1; }
echo "$out"
while IFS= read -r line; do
  grep -qxF -- "$line" <<<"$out" || { echo "FAIL: expected output line not printed: '$line'"; exit 1; }
done < "$tmp/expected.txt"
# The package is what the doc says it is.
for f in lib/cmake/hypic/hypicConfig.cmake lib/pkgconfig/hypic.pc include/hypic/sdk/agent.h lib/libhypic_sdk.a; do
  [ -f "$tmp/home/hypic/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
echo PASS

#!/usr/bin/env bash
# The README's demo (`tools/setup.sh demo` builds, then execs tools/demo.sh), run as it is with this
# build's hypic, and its answers checked: every answer it prints must be the expected one it prints for
# that question (section 1: questions over documents; section 3: the tool loop), and each eval-pic run
# of section 2 must report its prompts in every mode (on the long-memory model: hypic answering as many
# as full recompute, naive fewer). A wrong answer or a failing step fails the test.
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
HYPIC="$HYPIC" "$HYPIC_SOURCE_DIR/tools/demo.sh" >"$tmp/out" 2>"$tmp/err" || {
  cat "$tmp/out" "$tmp/err"; echo "FAIL: tools/demo.sh exited with an error"; exit 1; }
cat "$tmp/out"
echo "(tools/demo.sh took $(( $(date +%s) - start )) s)"
python3 - "$tmp/out" "$HYPIC_SOURCE_DIR" <<'PY'
import json, os, re, sys
out = open(sys.argv[1]).read()
sections = re.split(r"^== ", out, flags=re.M)[1:]
fail = []

def expected_of(sec):
    m = re.search(r"^   Expected answers: (.*)$", sec, re.M)
    return [a.strip() for a in m.group(1).split(" | ")] if m else None

def compare(name, expected, got):
    if expected is None or not expected:
        fail.append(name + ": no expected answers printed")
    elif got != expected:
        fail.append("%s: answers %s, expected %s" % (name, got, expected))
    else:
        print("ok - %s: %d of %d answers as expected" % (name, len(got), len(expected)))

by_number = {s.split(".", 1)[0]: s for s in sections}
# 1. `hypic run --brief`: one line per question, "QUESTION -> ANSWER  H/N blocks hit ...".
s1 = by_number.get("1", "")
compare("questions over documents", expected_of(s1),
        re.findall(r"^.* -> (.*?)\s+\d+/\d+\s+blocks hit", s1, re.M))
# 2. eval-pic: one JSON report per run, every mode over every prompt.
s2 = by_number.get("2", "")
runs = re.split(r"^-- ", s2, flags=re.M)[1:] if "-- " in s2 else [s2]
dec = json.JSONDecoder()
for run in runs:
    at = run.find("{")
    try:
        report = dec.raw_decode(run[at:])[0]
        modes = report["modes"]
        ok = report["prompts"] > 0 and modes and all(m["prompt_tokens_mean"] > 0 for m in modes.values())
    except (ValueError, KeyError, TypeError):
        ok = False
    if ok and "hypic-qa-long" in run.split("\n", 1)[0] and {"full", "hypic", "naive"} <= set(modes):
        # The long-memory model's ordered questions: what the demo is there to show.
        em = {m: modes[m].get("exact_match", -1) for m in ("full", "hypic", "naive")}
        if not (em["hypic"] >= em["full"] and em["naive"] < em["hypic"]):
            fail.append("eval-pic %s: exact match full %.3f hypic %.3f naive %.3f: hypic must match full and "
                        "naive must lose" % (run.split(",")[0].strip(), em["full"], em["hypic"], em["naive"]))
    if ok:
        print("ok - eval-pic %s: %d prompts in %s" % (run.split(",")[0].strip(), report["prompts"], ", ".join(modes)))
    else:
        fail.append("eval-pic run without a report: " + run[:200])
if not runs:
    fail.append("section 2 (eval-pic) is missing")
# 3. The tool loop (only where examples/models/hypic-agent-tiny is installed): each run prints its
# answer, then "  [tool] ..." lines (a result may run over several lines), "  [cache] ..." and the
# blocks indented by four spaces.
agent = os.path.join(sys.argv[2], "examples/models/hypic-agent-tiny/model.safetensors")
s3 = by_number.get("3")
if os.path.exists(agent) and s3 is None:
    fail.append("section 3 (the tool loop) is missing though the agent model is installed")
if s3 is not None:
    answers, state, cur = [], "answer", []
    for line in s3.splitlines()[2:]:
        if state == "answer" and not line.startswith("  ["):
            cur.append(line)
            continue
        if state == "answer":
            answers.append("\n".join(cur).strip())
            cur, state = [], "report"
        if line.startswith("  [cache]"):
            state = "blocks"
        elif state == "blocks" and not line.startswith("    "):
            state, cur = "answer", [line]
    compare("tool loop", expected_of(s3), answers)
if fail:
    print("FAIL: " + "\nFAIL: ".join(fail))
    sys.exit(1)
PY

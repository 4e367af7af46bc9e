# Kernel durations of a hypic_bench_kernels --only chain trace, block by block of like launches (median us).
import statistics as st, sys
sys.path.insert(0, "tools/bench")
import kernel_gaps as kg
ks = [k for k in kg.load(sys.argv[1])["K"] if "state_chain" in k["name"] or "span_operators" in k["name"]]
rows, prev_e, i = [], None, 0
while i < len(ks):
    k = ks[i]
    gap = (k["s"] - prev_e) / 1e3 if prev_e else 0.0
    if "span_operators" in k["name"] and i + 1 < len(ks) and "state_chain" in ks[i + 1]["name"]:
        c = ks[i + 1]
        rows.append(("ops+chain", (k["e"] - k["s"]) / 1e3, (c["s"] - k["e"]) / 1e3, (c["e"] - c["s"]) / 1e3, gap))
        prev_e = c["e"]; i += 2; continue
    kind = "ops" if "span_operators" in k["name"] else "chain"
    rows.append((kind, (k["e"] - k["s"]) / 1e3 if kind == "ops" else 0.0, 0.0, (k["e"] - k["s"]) / 1e3 if kind == "chain" else 0.0, gap))
    prev_e = k["e"]; i += 1
blocks = []
for r in rows:
    if blocks and blocks[-1][0] == r[0]: blocks[-1][1].append(r)
    else: blocks.append((r[0], [r]))
for kind, rs in blocks:
    med = lambda j: st.median(x[j] for x in rs)
    print(f"{kind:10s} n={len(rs):4d} ops {med(1):8.2f}  ops->chain gap {med(2):6.2f}  chain {med(3):8.2f}  gap before {med(4):7.2f}")

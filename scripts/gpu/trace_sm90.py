#!/usr/bin/env python3
"""Summarises a Hopper-kernel timeline dump (module built with -DDSV4_SM90_TRACE, bench run with
DSV4_TRACE_OUT=file): median cycles of each step per chunk, per role, over all CTAs.

Usage: trace_sm90.py TRACE_FILE [CTA]   (CTA: also print that CTA's stamps chunk by chunk)
A persistent CTA (several work items) numbers its chunks on across items (the first 48 are kept); its
header stamps, and so the per-CTA summary, are those of its last item.
The stamps cost time on the roles' critical paths: a trace build of the wgmma kernel ran prefill h64
75 % slower than the real build. Read the steps' shares from it, and take periods from real-build
timings."""
import struct
import sys
from statistics import median

HEADER, PER_CHUNK = 20, 12
(SM, START, QREADY, WG0_EPI, WG0_END, WG1_END, PROD_END, CHUNKS_RUN, INIT, Q_ISSUED, EPI_BAR, EPI_STAGED,
 GSTART, GEND, PROD_ENTER, PROD_IDX, PROD_ISSUED0, PROD_ISSUED1, PROD_DATA0) = range(19)
(P_TOP, P_EMPTY, P_DATA, P_FULL, W0_FULL, W0_QK, W0_P, W0_PV, W1_P, W1_PV) = range(10)
STEP_NAMES = ["p.top", "p.free", "p.data", "p.full", "w0.full", "w0.qk", "w0.p", "w0.pv", "w1.p", "w1.pv"]


def main(path, show_cta=None):
    with open(path, "rb") as f:
        ctas, slots, khz = struct.unpack("<3I", f.read(12))
        data = f.read()
    words = struct.unpack("<%dI" % (ctas * slots), data[: ctas * slots * 4])
    chunks_max = (slots - HEADER) // PER_CHUNK
    acc = {}
    g0 = min(words[c * slots + GSTART] for c in range(ctas) if words[c * slots + START] != 0)

    def add(name, v):
        acc.setdefault(name, []).append(v)

    for c in range(ctas):
        r = words[c * slots:(c + 1) * slots]
        start = r[START]
        if start == 0 and r[WG0_END] == 0:
            continue
        rel = lambda x: (x - start) & 0xFFFFFFFF
        n = min(r[CHUNKS_RUN], chunks_max)
        ch = lambda i, s: rel(r[HEADER + i * PER_CHUNK + s])
        add("cta: total (start -> WG0 end)", rel(r[WG0_END]))
        add("cta: start (ns after the first CTA)", (r[GSTART] - g0) & 0xFFFFFFFF)
        add("cta: end (ns after the first CTA)", (r[GEND] - g0) & 0xFFFFFFFF)
        add("cta: barriers initialised", rel(r[INIT]))
        add("cta: Q issued", rel(r[Q_ISSUED]))
        add("cta: Q ready", rel(r[QREADY]))
        if r[PROD_ENTER] != 0:  # FP8 producers only
            add("cta: producer loop entered", rel(r[PROD_ENTER]))
            add("cta: producer first list entry in", rel(r[PROD_IDX]))
            add("cta: producer slot 0 loads issued", rel(r[PROD_ISSUED0]))
            add("cta: producer slot 1 loads issued", rel(r[PROD_ISSUED1]))
            add("cta: producer slot 0 first data in", rel(r[PROD_DATA0]))
        add("cta: epilogue: barrier", rel(r[EPI_BAR]) - rel(r[WG0_EPI]))
        add("cta: epilogue: staged", rel(r[EPI_STAGED]) - rel(r[EPI_BAR]))
        add("cta: epilogue: stores", rel(r[WG0_END]) - rel(r[EPI_STAGED]))
        add("cta: epilogue (WG0)", rel(r[WG0_END]) - rel(r[WG0_EPI]))
        add("cta: chunks", n)
        if n == 0:
            continue
        add("cta: first buffer ready (WG0)", ch(0, W0_FULL))
        add("cta: loop (first ready -> last O)", ch(n - 1, W0_PV) - ch(0, W0_FULL))
        for i in range(n):
            tag = "first" if i == 0 else "steady"
            if r[HEADER + i * PER_CHUNK + P_EMPTY] != 0:
                add(f"prod {tag}: top -> buffer free (wait)", ch(i, P_EMPTY) - ch(i, P_TOP))
                if r[HEADER + i * PER_CHUNK + P_DATA] != 0:  # FP8: the producer sees its data arrive
                    add(f"prod {tag}: buffer free -> data in", ch(i, P_DATA) - ch(i, P_EMPTY))
                    add(f"prod {tag}: data in -> handed over", ch(i, P_FULL) - ch(i, P_DATA))
                else:  # bf16: copies issued, then they land on their own (WG0 sees the buffer full)
                    add(f"prod {tag}: buffer free -> copies issued", ch(i, P_FULL) - ch(i, P_EMPTY))
                    add(f"prod {tag}: buffer free -> WG0 sees it full", ch(i, W0_FULL) - ch(i, P_EMPTY))
                if i + 1 < n:
                    add(f"prod {tag}: handed over -> next top", ch(i + 1, P_TOP) - ch(i, P_FULL))
                    add(f"prod {tag}: period", ch(i + 1, P_TOP) - ch(i, P_TOP))
            prev = ch(i - 1, W0_PV) if i > 0 else rel(r[QREADY])
            add(f"wg0 {tag}: wait buffer", ch(i, W0_FULL) - prev)
            add(f"wg0 {tag}: S = QK^T", ch(i, W0_QK) - ch(i, W0_FULL))
            add(f"wg0 {tag}: softmax + P", ch(i, W0_P) - ch(i, W0_QK))
            add(f"wg0 {tag}: O += PV", ch(i, W0_PV) - ch(i, W0_P))
            if i > 0:
                add(f"wg0 {tag}: period", ch(i, W0_PV) - ch(i - 1, W0_PV))
                add(f"wg1 {tag}: wait P", ch(i, W1_P) - ch(i - 1, W1_PV))
            add(f"wg1 {tag}: O += PV", ch(i, W1_PV) - ch(i, W1_P))
    if show_cta is not None:
        r = words[show_cta * slots:(show_cta + 1) * slots]
        start = r[START]
        print(f"CTA {show_cta} (SM {r[SM]}): init {(r[INIT] - start) & 0xFFFFFFFF}, Q ready "
              f"{(r[QREADY] - start) & 0xFFFFFFFF}, end {(r[WG0_END] - start) & 0xFFFFFFFF}")
        for i in range(chunks_max):  # persistent CTAs: every item's chunks, numbered on
            row = r[HEADER + i * PER_CHUNK:HEADER + (i + 1) * PER_CHUNK]
            if not any(row[s] for s in range(len(STEP_NAMES))):
                continue
            print(f"  chunk {i:2d}: " + " ".join(f"{STEP_NAMES[s]}={(row[s] - start) & 0xFFFFFFFF:7d}"
                                                 for s in (P_TOP, P_EMPTY, P_DATA, P_FULL, W0_FULL,
                                                           W0_QK, W0_P, W0_PV, W1_P, W1_PV) if row[s] != 0))
    ends = acc.get("cta: end (ns after the first CTA)", [])
    if ends:
        print(f"kernel span (first CTA start -> last CTA end): {max(ends)} ns")
    ns = 1e6 / khz
    print(f"{ctas} CTAs, clock {khz / 1000:.0f} MHz (cycles; median, mean, ns at that clock)")
    for name in sorted(acc):
        v = acc[name]
        print(f"  {name:44s} {median(v):9.0f} {sum(v) / len(v):9.0f} {median(v) * ns:9.0f} ns  (n={len(v)})")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)

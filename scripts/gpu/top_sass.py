"""Prints the SASS lines with the most stall samples from `ncu --page source --print-source sass --csv`,
each with its leading stall reasons (the per-reason sample columns ncu exports), and the totals per
reason. Usage: top_sass.py CSV [N]"""
import csv
import sys

rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = None
for i, r in enumerate(rows):
    if any("Source" == c or "Address" == c for c in r):
        head = i
        break
if head is None:
    print("no table header found; first lines:")
    for r in rows[:5]:
        print(r)
    sys.exit(0)
cols = rows[head]
samp = [i for i, c in enumerate(cols) if "Sampling (All" in c]
src = [i for i, c in enumerate(cols) if c == "Source"]
addr = [i for i, c in enumerate(cols) if c == "Address"]
if not samp or not src:
    print("columns:", cols)
    sys.exit(0)
s, t = samp[0], src[0]
# Per-reason sample columns (names like "stall_long_sb" or "Warp Stall Sampling (...): reason").
reasons = [i for i, c in enumerate(cols) if i != s and ("stall" in c.lower()) and "Not-issued" not in c]


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


data = []
for r in rows[head + 1:]:
    if len(r) <= max([s, t] + reasons):
        continue
    data.append((num(r[s]), r[addr[0]] if addr else "", r[t], [(num(r[i]), cols[i]) for i in reasons]))
total = sum(d[0] for d in data) or 1.0
print(f"total samples {total:.0f}, instructions {len(data)}")
sums = {}
for d in data:
    for v, name in d[3]:
        sums[name] = sums.get(name, 0.0) + v
print("by reason:", ", ".join(f"{n} {100 * v / total:.1f}%" for n, v in sorted(sums.items(), key=lambda x: -x[1])[:12]
                              if v > 0))
for n, a, txt, rs in sorted(data, key=lambda d: -d[0])[: int(sys.argv[2]) if len(sys.argv) > 2 else 45]:
    top = ", ".join(f"{name.split(':')[-1].strip()} {v:.0f}" for v, name in sorted(rs, reverse=True)[:3] if v > 0)
    print(f"{100 * n / total:5.1f}%  {a:>6} {txt[:70]:70s} [{top}]")

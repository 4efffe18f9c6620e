"""Prints the SASS lines with the most stall samples from `ncu --page source --print-source sass --csv`."""
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
print("columns:", cols[:12])
samp = [i for i, c in enumerate(cols) if "Sampling (All" in c]
src = [i for i, c in enumerate(cols) if c == "Source"]
if not samp or not src:
    sys.exit(0)
s, t = samp[0], src[0]
data = []
for r in rows[head + 1:]:
    try:
        data.append((float(r[s].replace(",", "")), r[t]))
    except (ValueError, IndexError):
        pass
total = sum(d[0] for d in data)
print(f"total samples {total:.0f}, instructions {len(data)}")
for n, txt in sorted(data, reverse=True)[: int(sys.argv[2]) if len(sys.argv) > 2 else 45]:
    print(f"{100 * n / total:5.1f}%  {txt}")

#!/usr/bin/python3
"""Plain PyTorch on the CPU (Debian's python3-torch), the baseline of the CPU benchmark: the same
shapes as bench_decode_cpu.cpp (each token attends to its own random rows of a cache far larger than
the caches of the CPU, and each repetition to rows the others did not read, so that they come from
memory), attention sink on.

  bf16 cache: gather the rows, bf16 Q K^T, softmax with the sink in the denominator, bf16 P V.
  FP8 584 B cache: gather the byte rows, decode the 448 e4m3 bytes through a 256-entry table times
  the UE8M0 scale of each 64 dims (the rope dims are bf16), then the same bf16 attention.

On CPUs without AVX512_BF16, PyTorch's bf16 matrix products are emulated and far slower than fp32
ones; each case therefore also runs the same attention with the gathered rows widened to fp32, and
the faster of the two is reported (its label says which), so the baseline is the best plain PyTorch.

The caches span DSV4_BENCH_POOL_BYTES (bench_all.sh sets it as for bench_decode_cpu.cpp; default
1 GiB), as a power of two of rows.

Writes Google Benchmark-shaped JSON (names BM_torch_bf16/tokens:T/heads:H/keys:K/threads:N, median
time in ms, counter GFLOP = GFLOP/s) to the file given as the first argument.

  /usr/bin/python3 bench/cpu/torch_cpu.py out.json [max threads, default 2] [reps, default 9]
"""
import json
import os
import statistics
import sys
import time

import torch

SHAPES = [(8, 64, 640), (32, 64, 640), (8, 128, 1152), (8, 16, 1152), (8, 8, 640)]


def pool_rows(row_bytes):
    """The power of two of rows that spans DSV4_BENCH_POOL_BYTES (default 1 GiB)."""
    target = int(os.environ.get("DSV4_BENCH_POOL_BYTES", 1 << 30))
    rows = 1
    while rows * row_bytes < target:
        rows *= 2
    return rows


def e4m3_table():
    """The 256 OCP e4m3fn values as fp32 (0x7f / 0xff are NaN)."""
    values = []
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        exp, man = (b >> 3) & 0xF, b & 7
        if exp == 0xF and man == 7:
            values.append(float("nan"))
        elif exp == 0:
            values.append(sign * man / 512.0)
        else:
            values.append(sign * (1 + man / 8.0) * 2.0 ** (exp - 7))
    return torch.tensor(values, dtype=torch.float32)


def fp8_pool(n):
    """n rows of the 584 B layout as [n, 584] uint8 (values ~ N(0, 1), one scale per 64 dims)."""
    x = torch.randn(n, 512)
    tiles = x[:, :448].reshape(n, 7, 64)
    e = torch.ceil(torch.log2(tiles.abs().amax(-1).clamp_min(1e-30) / 448.0)).clamp(-126, 127)
    table = e4m3_table()
    finite = torch.nan_to_num(table, nan=1e9)
    scaled = (tiles / torch.exp2(e).unsqueeze(-1)).reshape(n, 448)
    codes = torch.bucketize(scaled, finite.sort().values)  # nearest-ish code: fine for timing
    order = finite.sort().indices
    q = order[codes.clamp(max=255)].to(torch.uint8)
    rope = x[:, 448:].to(torch.bfloat16).view(torch.int16).view(torch.uint8).reshape(n, 128)
    scales = torch.cat([(e + 127).to(torch.uint8), torch.zeros(n, 1, dtype=torch.uint8)], -1)
    return torch.cat([q, rope, scales], dim=-1)


def dequant(rows, table):
    """[..., 584] uint8 -> [..., 512] bf16: table lookup x 2^(scale - 127), rope bf16."""
    lead = rows.shape[:-1]
    nope = table[rows[..., :448].long()].view(*lead, 7, 64)
    scale = torch.exp2(rows[..., 576:583].float() - 127.0).unsqueeze(-1)
    rope = rows[..., 448:576].contiguous().view(torch.int16).view(torch.bfloat16).float()
    return torch.cat([(nope * scale).view(*lead, 448), rope], dim=-1).to(torch.bfloat16)


def attention(q, k, sink, scale):
    s = torch.bmm(q, k.transpose(1, 2)).float() * scale  # [T, H, K]
    s = torch.cat([s, sink.view(1, -1, 1).expand(s.shape[0], -1, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)[..., :-1]
    return torch.bmm(p.to(k.dtype), k)


def median_ms(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    out_path = sys.argv[1]
    max_threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 9
    torch.manual_seed(0)
    # 4096 random rows repeated: the values do not change the timing, the addresses do.
    pools = {"bf16": torch.randn(4096, 512).to(torch.bfloat16), "fp8": fp8_pool(4096)}
    pools = {k: v.repeat(pool_rows(v.shape[1] * v.element_size()) // 4096, 1)
             for k, v in pools.items()}
    table = e4m3_table()
    results = []
    threads = 1
    while threads <= max_threads:
        torch.set_num_threads(threads)
        for cache, pool in pools.items():
            for t, h, keys in SHAPES:
                q = torch.randn(t, h, 512).to(torch.bfloat16)
                # Each call reads the next rows of a random order of the whole cache.
                order = torch.randperm(pool.shape[0])
                sets = order[:pool.shape[0] // (t * keys) * t * keys].view(-1, t, keys)
                calls = [0]
                sink = torch.randn(h)

                def run(compute):
                    idx = sets[calls[0] % sets.shape[0]]
                    calls[0] += 1
                    rows = pool[idx]
                    k = dequant(rows, table) if cache == "fp8" else rows
                    return attention(q.to(compute), k.to(compute), sink, 512 ** -0.5)

                # Both compute types briefly, then the faster one for the timed repetitions.
                trial = {}
                for compute in (torch.bfloat16, torch.float32):
                    run(compute)
                    trial[compute] = median_ms(lambda: run(compute), 2)
                compute = min(trial, key=trial.get)
                ms = median_ms(lambda: run(compute), reps)
                label = "bf16 products" if compute == torch.bfloat16 else "fp32 products"
                gflop = 2.0 * h * keys * t * 1024 * 1e-9
                name = f"BM_torch_{cache}/tokens:{t}/heads:{h}/keys:{keys}/threads:{threads}"
                results.append({"name": name, "run_name": name, "run_type": "iteration",
                                "iterations": reps, "real_time": ms, "cpu_time": ms,
                                "time_unit": "ms", "label": label, "GFLOP": gflop / (ms * 1e-3)})
                print(f"{name:60s} {ms:9.3f} ms {gflop / (ms * 1e-3):8.1f} GFLOP/s ({label})",
                      flush=True)
        threads *= 2
    with open(out_path, "w") as f:
        json.dump({"context": {"torch": torch.__version__}, "benchmarks": results}, f, indent=1)


if __name__ == "__main__":
    main()

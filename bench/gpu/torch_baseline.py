#!/usr/bin/env python3
"""Plain PyTorch DSV4 sparse attention (gather + bmm + softmax with sink), the baseline the CUDA
backend is compared with, for the bf16 cache and the FP8 584 B layout (448 e4m3 bytes with a UE8M0
scale per 64 dims, 64 bf16 rope dims; dequantised after the gather).

  python3 bench/gpu/torch_baseline.py --shapes SHAPES --out TORCH.csv

SHAPES holds one shape per line, "cache tokens heads keys" (cache: fp8 or bf16; keys per token):
what `dsv4_bench_cuda --list_torch_shapes` prints, so that both time the same shapes. Each shape
is timed by CUDA events, after 3 warm-up runs, as the median of 20 runs, twice: with the L2 flushed
before each run by a 256 MB memset as dsv4_bench_cuda does for the library (us), and back to back
(us_warm). TORCH.csv has the columns cache,tokens,heads,keys,us,us_warm,tflops, which
dsv4_bench_cuda --torch_csv=TORCH.csv turns into its torch_us and torch_ratio counters. Exits 77
without torch or a GPU (nothing written)."""
import argparse
import sys


def attention(torch, q, k, sink, scale):
    s = torch.einsum("thd,tkd->thk", q, k).float() * scale  # [T, H, K]
    s = torch.cat([s, sink.view(1, -1, 1).expand(s.shape[0], -1, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)[..., :-1]  # the sink joins the denominator only
    return torch.einsum("thk,tkd->thd", p.to(torch.bfloat16), k)


def dequant_v4(torch, rows):
    """[..., 584] uint8 rows (nope e4m3 | rope bf16 | 7 UE8M0 scales + pad) -> [..., 512] bf16."""
    lead = rows.shape[:-1]
    nope = rows[..., :448].contiguous().view(torch.float8_e4m3fn).float().view(*lead, 7, 64)
    scale = torch.exp2(rows[..., 576:583].float() - 127.0).unsqueeze(-1)
    rope = rows[..., 448:576].contiguous().view(torch.bfloat16).float()
    return torch.cat([(nope * scale).view(*lead, 448), rope], dim=-1).to(torch.bfloat16)


def fp8_cache(torch, n, dev):
    """n random rows of the 584 B layout (values ~ N(0, 0.1), one scale per 64 dims)."""
    x = torch.randn(n, 512, device=dev) / 10
    tiles = x[:, :448].view(n, 7, 64)
    e = torch.ceil(torch.log2(tiles.abs().amax(-1).clamp_min(1e-30) / 448.0)).clamp(-126, 127)
    q = (tiles / torch.exp2(e).unsqueeze(-1)).to(torch.float8_e4m3fn).view(torch.uint8).view(n, 448)
    rope = x[:, 448:].to(torch.bfloat16).view(torch.uint8)
    scales = torch.cat([(e + 127).to(torch.uint8), torch.zeros(n, 1, dtype=torch.uint8, device=dev)], -1)
    return torch.cat([q, rope, scales], dim=-1)


def read_shapes(path):
    shapes = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 4 and fields[0] in ("fp8", "bf16"):
                shapes.append((fields[0], int(fields[1]), int(fields[2]), int(fields[3])))
    return shapes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--shapes", required=True, help="file of 'cache tokens heads keys' lines")
    parser.add_argument("--out", required=True, help="CSV to write")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: no torch")
        return 77
    if not torch.cuda.is_available():
        print("skipped: torch sees no GPU")
        return 77
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    n = 1 << 20  # cache rows: larger than L2
    caches = {"bf16": (torch.randn(n, 512, device=dev) / 10).to(torch.bfloat16),
              "fp8": fp8_cache(torch, n, dev)}
    rows = []
    for cache_name, tokens, heads, keys in read_shapes(args.shapes):
        cache = caches[cache_name]
        q = torch.randn(tokens, heads, 512, device=dev).clamp(-1, 1).to(torch.bfloat16)
        idx = torch.randint(0, n, (tokens, keys), device=dev)
        sink = torch.randn(heads, device=dev)

        def run():
            if cache_name == "fp8":
                # The gathered rows are dequantised (the kernel does the same after its gather).
                return attention(torch, q, dequant_v4(torch, cache[idx]), sink, 512 ** -0.5)
            return attention(torch, q, cache[idx], sink, 512 ** -0.5)

        for _ in range(3):
            run()
        us = {}
        for mode in ("flushed", "warm"):
            times = []
            for i in range(20):
                if mode == "flushed":
                    flush.fill_(i & 0xFF)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                run()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) * 1000)
            us[mode] = sorted(times)[len(times) // 2]
        tflops = 2 * heads * tokens * keys * 1024 / us["flushed"] / 1e6
        rows.append(f"{cache_name},{tokens},{heads},{keys},{us['flushed']:.2f},{us['warm']:.2f},{tflops:.2f}")
        print(rows[-1], flush=True)
        del q, idx
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        f.write("cache,tokens,heads,keys,us,us_warm,tflops\n")
        f.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

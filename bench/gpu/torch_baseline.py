"""Plain PyTorch DSV4 sparse attention (gather + bmm + softmax with sink), the baseline the CUDA backend
is compared with, for the bf16 cache and the FP8 584 B layout (448 e4m3 bytes with a UE8M0 scale per
64, 64 bf16 rope dims; dequantised after the gather). Prints median microseconds (CUDA events,
warm-up, 20 reps) per shape twice: with L2 flushed before each rep as bench_cuda does for the library
(us), and back to back (us(warm)). Run by scripts/gpu/run_all.sh bench."""
import torch

SHAPES = [  # (tokens = batch * s_q, heads, keys per token)
    (4, 64, 640), (128, 64, 640), (256, 64, 640), (128, 128, 1152), (256, 128, 1152),
    (4096, 64, 512), (4096, 128, 1024),
]


def attention(q, cache, idx, sink, scale, k=None):
    if k is None:
        k = cache[idx]                                      # [T, K, 512] gathered rows
    s = torch.einsum("thd,tkd->thk", q, k).float() * scale  # [T, H, K]
    s = torch.cat([s, sink.view(1, -1, 1).expand(s.shape[0], -1, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)[..., :-1]                  # the sink joins the denominator only
    return torch.einsum("thk,tkd->thd", p.to(torch.bfloat16), k)


def dequant_v4(rows):
    """[..., 584] uint8 rows (nope e4m3 | rope bf16 | 7 UE8M0 scales + pad) -> [..., 512] bf16."""
    lead = rows.shape[:-1]
    nope = rows[..., :448].contiguous().view(torch.float8_e4m3fn).float().view(*lead, 7, 64)
    scale = torch.exp2(rows[..., 576:583].float() - 127.0).unsqueeze(-1)
    rope = rows[..., 448:576].contiguous().view(torch.bfloat16).float()
    return torch.cat([(nope * scale).view(*lead, 448), rope], dim=-1).to(torch.bfloat16)


def fp8_cache(n, dev):
    """n random rows of the 584 B layout (values ~ N(0, 0.1), one scale per 64 dims)."""
    x = torch.randn(n, 512, device=dev) / 10
    tiles = x[:, :448].view(n, 7, 64)
    e = torch.ceil(torch.log2(tiles.abs().amax(-1).clamp_min(1e-30) / 448.0)).clamp(-126, 127)
    q = (tiles / torch.exp2(e).unsqueeze(-1)).to(torch.float8_e4m3fn).view(torch.uint8).view(n, 448)
    rope = x[:, 448:].to(torch.bfloat16).view(torch.uint8)
    scales = torch.cat([(e + 127).to(torch.uint8), torch.zeros(n, 1, dtype=torch.uint8, device=dev)], -1)
    return torch.cat([q, rope, scales], dim=-1)


def main():
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    print(f"{'cache':>6} {'tokens':>7} {'heads':>6} {'keys':>6} {'us':>10} {'TFLOP/s':>8} {'us(warm)':>10}")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    n = 1 << 20  # cache rows: larger than L2
    caches = {"bf16": (torch.randn(n, 512, device=dev) / 10).to(torch.bfloat16), "fp8": fp8_cache(n, dev)}
    for layout, cache in caches.items():
        for t, h, kk in SHAPES:
            if layout == "fp8" and t > 256:
                continue  # FlashMLA's FP8 cases are decode shapes
            q = torch.randn(t, h, 512, device=dev).clamp(-1, 1).to(torch.bfloat16)
            idx = torch.randint(0, n, (t, kk), device=dev)
            sink = torch.randn(h, device=dev)

            def run():
                if layout == "fp8":
                    # The gathered rows are dequantised (the kernel does the same after its gather).
                    return attention(q, None, idx, sink, 512 ** -0.5, dequant_v4(cache[idx]))
                return attention(q, cache, idx, sink, 512 ** -0.5)

            for _ in range(3):
                run()
            # Timed twice: L2 flushed before each rep as bench_cuda does for the library (a 256 MB
            # memset outside the timed span: both start from the same cache state, and the memset
            # lets the host queue every kernel before they run), and warm (back to back, as the
            # earlier rounds timed it: small shapes then also wait on the host's launches).
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
            tflops = 2 * h * t * kk * 1024 / us["flushed"] / 1e6
            print(f"{layout:>6} {t:>7} {h:>6} {kk:>6} {us['flushed']:>10.1f} {tflops:>8.1f} {us['warm']:>10.1f}")
            del q, idx


if __name__ == "__main__":
    main()

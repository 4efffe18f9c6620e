"""Plain PyTorch DSV4 sparse attention (bf16 cache: gather + bmm + softmax with sink), the baseline the
CUDA backend is compared with. Prints median microseconds (CUDA events, warm-up, 20 reps) per shape.
Run by scripts/gpu/run_all.sh bench."""
import torch

SHAPES = [  # (tokens = batch * s_q, heads, keys per token)
    (4, 64, 640), (128, 64, 640), (256, 64, 640), (128, 128, 1152), (256, 128, 1152),
    (4096, 64, 512), (4096, 128, 1024),
]


def attention(q, cache, idx, sink, scale):
    k = cache[idx]                                          # [T, K, 512] gathered rows
    s = torch.einsum("thd,tkd->thk", q, k).float() * scale  # [T, H, K]
    s = torch.cat([s, sink.view(1, -1, 1).expand(s.shape[0], -1, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)[..., :-1]                  # the sink joins the denominator only
    return torch.einsum("thk,tkd->thd", p.to(torch.bfloat16), k)


def main():
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    print(f"{'tokens':>7} {'heads':>6} {'keys':>6} {'us':>10} {'TFLOP/s':>8}")
    for t, h, kk in SHAPES:
        n = 1 << 20  # cache rows: larger than L2
        cache = (torch.randn(n, 512, device=dev) / 10).to(torch.bfloat16)
        q = torch.randn(t, h, 512, device=dev).clamp(-1, 1).to(torch.bfloat16)
        idx = torch.randint(0, n, (t, kk), device=dev)
        sink = torch.randn(h, device=dev)
        for _ in range(3):
            attention(q, cache, idx, sink, 512 ** -0.5)
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            attention(q, cache, idx, sink, 512 ** -0.5)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1000)
        us = sorted(times)[len(times) // 2]
        print(f"{t:>7} {h:>6} {kk:>6} {us:>10.1f} {2 * h * t * kk * 1024 / us / 1e6:>8.1f}")
        del cache, q, idx


if __name__ == "__main__":
    main()

// FlashMLA's measured times for the cases bench_cuda.cpp times, the anchors its counters
// flashmla_us and flashmla_ratio compare with. Provenance (shared/perf/targets.md): FlashMLA
// (deepseek-ai/FlashMLA 9241ae3, sm_90a) on its own DeepSeek-V4 "MODEL1" cases, run by its own
// benchmark: decode = split kernel + combine, s_q = 2, FP8 584 B cache, sink on, L2 flushed before
// each run; prefill = flash_mla_sparse_fwd, bf16 KV, s_q = 4096, sink on. Measured 2026-11-21 on an
// NVIDIA H200 (141 GB, 132 SMs) and an NVIDIA H100 80GB HBM3 (132 SMs). Times of another GPU model
// are never compared: a row applies when the device name contains its `device`.
#pragma once

#include <string>

namespace dsv4bench {

struct flashmla_anchor {
  const char* device;  // substring of cudaDeviceProp::name
  const char* name;    // the benchmark's name
  double us;
};

inline constexpr flashmla_anchor kFlashMlaAnchors[] = {
    {"H200", "cuda/CONFIG1/b:2", 15.0},
    {"H200", "cuda/CONFIG1/b:64", 49.0},
    {"H200", "cuda/CONFIG1/b:128", 93.3},
    {"H200", "cuda/CONFIG1/b:256", 176.6},
    {"H200", "cuda/CONFIG2/b:2", 17.2},
    {"H200", "cuda/CONFIG2/b:64", 106.3},
    {"H200", "cuda/CONFIG2/b:128", 206.3},
    {"H200", "cuda/CONFIG2/b:256", 406.7},
    {"H200", "cuda/CONFIG3/b:2", 16.3},
    {"H200", "cuda/CONFIG3/b:64", 71.7},
    {"H200", "cuda/CONFIG3/b:128", 120.2},
    {"H200", "cuda/CONFIG3/b:256", 203.2},
    {"H200", "cuda/CONFIG4/b:2", 16.4},
    {"H200", "cuda/CONFIG4/b:64", 88.8},
    {"H200", "cuda/CONFIG4/b:128", 155.2},
    {"H200", "cuda/CONFIG4/b:256", 275.9},
    {"H200", "cuda/prefill/heads:64/topk:512/s_kv:8192", 521.0},
    {"H200", "cuda/prefill/heads:64/topk:512/s_kv:65536", 591.0},
    {"H200", "cuda/prefill/heads:128/topk:1024/s_kv:8192", 1754.0},
    {"H200", "cuda/prefill/heads:128/topk:1024/s_kv:65536", 1920.0},
    {"H100", "cuda/CONFIG1/b:2", 15.8},
    {"H100", "cuda/CONFIG1/b:64", 53.3},
    {"H100", "cuda/CONFIG1/b:128", 99.4},
    {"H100", "cuda/CONFIG1/b:256", 188.7},
    {"H100", "cuda/CONFIG2/b:2", 18.0},
    {"H100", "cuda/CONFIG2/b:64", 110.0},
    {"H100", "cuda/CONFIG2/b:128", 211.7},
    {"H100", "cuda/CONFIG2/b:256", 411.3},
    {"H100", "cuda/CONFIG3/b:2", 16.9},
    {"H100", "cuda/CONFIG3/b:64", 74.8},
    {"H100", "cuda/CONFIG3/b:128", 126.1},
    {"H100", "cuda/CONFIG3/b:256", 211.3},
    {"H100", "cuda/CONFIG4/b:2", 16.9},
    {"H100", "cuda/CONFIG4/b:64", 92.7},
    {"H100", "cuda/CONFIG4/b:128", 159.6},
    {"H100", "cuda/CONFIG4/b:256", 281.3},
    {"H100", "cuda/prefill/heads:64/topk:512/s_kv:8192", 537.0},
    {"H100", "cuda/prefill/heads:64/topk:512/s_kv:65536", 700.0},
    {"H100", "cuda/prefill/heads:128/topk:1024/s_kv:8192", 1774.0},
    {"H100", "cuda/prefill/heads:128/topk:1024/s_kv:65536", 2046.0},
};

// FlashMLA's µs for benchmark `name` on device `device_name`, or 0 where it has none.
inline double flashmla_us(const std::string& device_name, const std::string& name) {
  for (const flashmla_anchor& a : kFlashMlaAnchors)
    if (name == a.name && device_name.find(a.device) != std::string::npos) return a.us;
  return 0.0;
}

}  // namespace dsv4bench

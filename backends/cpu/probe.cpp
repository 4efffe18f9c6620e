#include "probe.h"

#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define DSV4_CPU_X86 1
#endif

namespace dsv4 {
namespace cpu {
namespace {

#if DSV4_CPU_X86
// XCR0: which register state the OS saves (AVX needs XMM|YMM, AVX-512 also opmask|ZMM_hi).
uint64_t read_xcr0() {
  uint32_t eax = 0;
  uint32_t edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

std::string cpuid_brand() {
  unsigned int max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max_ext < 0x80000004u) return "";
  char brand[49] = {};
  for (unsigned int i = 0; i < 3; ++i) {
    unsigned int regs[4];
    __cpuid(0x80000002u + i, regs[0], regs[1], regs[2], regs[3]);
    std::memcpy(brand + 16 * i, regs, sizeof regs);
  }
  std::string s(brand);
  const size_t first = s.find_first_not_of(' ');
  return first == std::string::npos ? "" : s.substr(first);
}
#endif

std::string proc_cpuinfo_model() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "";
  char line[512];
  std::string model;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "model name", 10) != 0) continue;
    const char* colon = std::strchr(line, ':');
    if (colon == nullptr) continue;
    model = colon + 1;
    break;
  }
  std::fclose(f);
  const size_t first = model.find_first_not_of(" \t");
  const size_t last = model.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? "" : model.substr(first, last - first + 1);
}

// The best ISA tag, shown after the model name.
const char* feature_tag(const cpu_features& f) {
  if (f.amx_bf16) return "amx_bf16";
  if (f.avx512_bf16) return "avx512_bf16";
  if (f.avx512f) return "avx512";
  if (f.avx2 && f.fma) return "avx2+fma";
  if (f.avx2) return "avx2";
  if (f.sse42) return "sse4.2";
  return "baseline";
}

void copy_text(char* dst, size_t capacity, const char* src) {
  if (dst == nullptr || capacity == 0) return;
  std::snprintf(dst, capacity, "%s", src);
}

}  // namespace

cpu_features detect_features() {
  cpu_features f;
#if DSV4_CPU_X86
  unsigned int eax, ebx, ecx, edx;
  const unsigned int max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 1) return f;
  __cpuid(1, eax, ebx, ecx, edx);
  f.sse42 = (ecx >> 20) & 1u;
  const bool osxsave = (ecx >> 27) & 1u;
  const bool avx = (ecx >> 28) & 1u;
  const bool fma = (ecx >> 12) & 1u;
  const bool f16c = (ecx >> 29) & 1u;
  const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool ymm_state = (xcr0 & 0x6u) == 0x6u;    // XMM | YMM
  const bool zmm_state = (xcr0 & 0xe6u) == 0xe6u;  // + opmask | ZMM_hi256 | hi16_ZMM
  if (max_leaf >= 7 && avx && ymm_state) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    f.avx2 = (ebx >> 5) & 1u;
    f.fma = fma;
    f.f16c = f16c;
    const unsigned int leaf7_edx = edx;
    const bool tile_state = (xcr0 & 0x60000u) == 0x60000u;  // XTILECFG | XTILEDATA
    f.amx_bf16 = tile_state && ((leaf7_edx >> 22) & 1u) && ((leaf7_edx >> 24) & 1u);
    if (zmm_state) {
      f.avx512f = (ebx >> 16) & 1u;
      f.avx512bw = f.avx512f && ((ebx >> 30) & 1u);
      f.avx512vl = f.avx512f && ((ebx >> 31) & 1u);
      unsigned int sub_leaves = eax;
      if (f.avx512f && sub_leaves >= 1) {
        __cpuid_count(7, 1, eax, ebx, ecx, edx);
        f.avx512_bf16 = (eax >> 5) & 1u;
      }
    }
  }
#endif
  return f;
}

// Always runnable; a richer ISA scores higher (10 + feature bits) so an ISA-specific CPU
// module built later can outrank or defer to this one.
dsv4_status probe(int32_t* out_score, int32_t* out_device_count, char* reason,
                  size_t reason_capacity) {
  const cpu_features f = detect_features();
  int32_t score = 10;
  score += f.sse42 ? 1 : 0;
  score += f.avx2 ? 2 : 0;
  score += f.fma ? 4 : 0;
  score += f.avx512f ? 8 : 0;
  score += f.avx512_bf16 ? 16 : 0;
  if (out_score != nullptr) *out_score = score;
  if (out_device_count != nullptr) *out_device_count = 1;
  char text[64];
  std::snprintf(text, sizeof text, "ok (%s)", feature_tag(f));
  copy_text(reason, reason_capacity, text);
  return DSV4_STATUS_OK;
}

dsv4_status get_device_info(int32_t index, dsv4_device_info* out_info) {
  const cpu_features f = detect_features();
  std::string model = proc_cpuinfo_model();
#if DSV4_CPU_X86
  if (model.empty()) model = cpuid_brand();
#endif
  if (model.empty()) model = "CPU";
  const unsigned int cores = std::thread::hardware_concurrency();
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  out_info->device_type = DSV4_DEVICE_CPU;
  out_info->device_id = index;
  out_info->compute_units = static_cast<int32_t>(cores > 0 ? cores : 1);
  out_info->memory_bytes = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
  std::snprintf(out_info->name, sizeof out_info->name, "%s (%s)", model.c_str(), feature_tag(f));
  return DSV4_STATUS_OK;
}

bool request_amx_permission() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
  constexpr long kXfeatureXtiledata = 18;     // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace cpu
}  // namespace dsv4

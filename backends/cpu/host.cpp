#include "host.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

#include "module/module_slots.h"

namespace dsv4 {
namespace cpu {
namespace {
std::atomic<const dsv4_host_services*> g_host{nullptr};
}  // namespace

const dsv4_host_services* host() { return g_host.load(std::memory_order_acquire); }
void set_host(const dsv4_host_services* services) {
  g_host.store(services, std::memory_order_release);
}

dsv4_status fail(dsv4_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  report_module_error(host(), "cpu", format, args);
  va_end(args);
  return status;
}

void log(int32_t level, const char* format, ...) {
  const dsv4_host_services* h = host();
  if (h == nullptr || h->log == nullptr) return;
  char message[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  h->log(level, "cpu", message);
}

}  // namespace cpu
}  // namespace dsv4

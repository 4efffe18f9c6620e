// The host services the module was negotiated with, and the module's error/log helpers.
#pragma once

#include "dsv4_backend.h"

namespace dsv4 {
namespace cpu {

// Host services given to dsv4_backend_entry (never NULL once the module is negotiated).
const dsv4_host_services* host();
void set_host(const dsv4_host_services* services);

// Formats "cpu: <message>", hands it to host->set_error and returns `status`.
dsv4_status fail(dsv4_status status, const char* format, ...) __attribute__((format(printf, 2, 3)));

// Formats one log line and hands it to host->log.
void log(int32_t level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace cpu
}  // namespace dsv4

// The module side of the ABI negotiation in backends/include/dsv4_backend.h, shared by every
// backend module so each entry point only adds its own table.
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "dsv4_backend.h"

// "0.2.0": the library version a module is built with (its module_version text starts with it).
#define DSV4_MODULE_STRINGIFY2(x) #x
#define DSV4_MODULE_STRINGIFY(x) DSV4_MODULE_STRINGIFY2(x)
#define DSV4_MODULE_VERSION_STRING          \
  DSV4_MODULE_STRINGIFY(DSV4_VERSION_MAJOR) \
  "." DSV4_MODULE_STRINGIFY(DSV4_VERSION_MINOR) "." DSV4_MODULE_STRINGIFY(DSV4_VERSION_PATCH)

namespace dsv4 {

// Checks the host's services table and offered ABI; on success writes back min(host, ours).
inline dsv4_status negotiate_module_abi(const char* module_name, uint32_t* inout_abi_version,
                                        const dsv4_host_services* host,
                                        const dsv4_backend_iface* const* out_iface) {
  if (inout_abi_version == nullptr || out_iface == nullptr) return DSV4_STATUS_INVALID_ARGUMENT;
  if (host == nullptr || host->struct_size < sizeof(dsv4_host_services))
    return DSV4_STATUS_ABI_MISMATCH;
  const uint32_t host_version = *inout_abi_version;
  if ((host_version >> 16) != DSV4_MODULE_ABI_MAJOR) {
    if (host->set_error != nullptr) {
      char message[128];
      snprintf(message, sizeof message, "%s: module ABI major %u, host speaks %u", module_name,
               DSV4_MODULE_ABI_MAJOR, host_version >> 16);
      host->set_error(message);
    }
    return DSV4_STATUS_ABI_MISMATCH;
  }
  *inout_abi_version =
      host_version < DSV4_MODULE_ABI_VERSION ? host_version : DSV4_MODULE_ABI_VERSION;
  return DSV4_STATUS_OK;
}

}  // namespace dsv4

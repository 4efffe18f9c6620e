// dsv4_ctx: the selected backend module, its opened device and the logger of this context.
#pragma once

#include <string>

#include "base/log.h"
#include "dsv4/dsv4.h"
#include "loader/module.h"

struct dsv4_ctx {
  const dsv4::detail::loaded_module* module = nullptr;  // never unloaded
  void* mctx = nullptr;                                 // the module's context
  dsv4_device device{DSV4_DEVICE_CPU, 0};
  int32_t num_threads = 0;
  dsv4::detail::logger log;
  std::string path;    // module file
  std::string reason;  // why it was selected
};

namespace dsv4::detail {

// Reads ctx options under the struct_size rule (NULL = defaults) and checks them.
// dsv4_ctx_options_init values.
dsv4_ctx_options ctx_options_default_values();

dsv4_ctx_options read_ctx_options(const dsv4_ctx_options* options);

// Creates a context from checked options. Throws api_error.
dsv4_ctx* ctx_create(const dsv4_ctx_options& options);
void ctx_destroy(dsv4_ctx* ctx) noexcept;

// Enumeration / device queries (checked options).
void enumerate_backends(const dsv4_ctx_options& options, dsv4_backend_info* out, int32_t capacity,
                        int32_t* out_count);
void get_device_info(const dsv4_ctx_options& options, const char* backend, int32_t index,
                     dsv4_device_info* out_info);

}  // namespace dsv4::detail

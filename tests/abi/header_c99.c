/* The public headers compile as strict C99 (-std=c99 -pedantic -Werror -Wall -Wextra), and the
 * macros they define agree with the library that is linked. */
#include <dsv4/dsv4.h>
#include <dsv4/dsv4_paged.h>
#include <dsv4/dsv4_types.h>
#include <stdio.h>

#include "dsv4_backend.h"

int main(void) {
  dsv4_ctx_options options;
  dsv4_tensor tensor = {0};
  if (dsv4_ctx_options_init(&options) != DSV4_STATUS_OK) return 1;
  if (options.api_version != DSV4_API_VERSION) return 2;
  if (dsv4_get_version() != (uint32_t)DSV4_VERSION_NUMBER) return 3;
  tensor.dtype.code = DSV4_DTYPE_CODE_BFLOAT;
  tensor.dtype.bits = 16;
  tensor.dtype.lanes = 1;
  printf("C99: libdsv4 %s, module ABI %u.%u, dtype code %d\n", dsv4_get_version_string(),
         DSV4_MODULE_ABI_MAJOR, DSV4_MODULE_ABI_MINOR, tensor.dtype.code);
  return 0;
}

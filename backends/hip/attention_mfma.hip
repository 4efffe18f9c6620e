// Placeholder until the CDNA matrix-core kernel lands.
// clang-format off
#include "platform.h"  // first: HIP declares device memcpy before the shared headers use it
// clang-format on
#include "attention_common.h"

namespace dsv4 {
namespace hip {

hipError_t mfma_attention_configure(int, int, int*) { return hipErrorInvalidValue; }
hipError_t mfma_attention_launch(const attention_params&, hipStream_t) {
  return hipErrorInvalidValue;
}

}  // namespace hip
}  // namespace dsv4

// Opening the HIP runtime (runtime.cpp, AMD build): the NVIDIA and emulator builds link theirs.
#pragma once

#include <string>

namespace dsv4 {
namespace hip {

#if defined(DSV4_HIP_ON_NVIDIA) || defined(DSV4_HIP_EMULATOR)
inline bool runtime_open(const char*, std::string*) { return true; }
#else
// Opens libamdhip64 once (override_path alone when given: DSV4_HIP_RUNTIME; else the usual names)
// and hands it the module's kernels; false with the reason when there is none.
bool runtime_open(const char* override_path, std::string* reason);
#endif

}  // namespace hip
}  // namespace dsv4

#include "compare.h"

#include <sstream>

namespace dsv4test {

::testing::AssertionResult compare_close(const std::vector<double>& got,
                                         const std::vector<double>& want, const Tolerance& tol,
                                         const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != reference size " << want.size();
  }
  const CompareResult r = compare_rule(got, want, tol);
  if (r.passed) return ::testing::AssertionSuccess();
  std::ostringstream s;
  s.precision(9);
  if (r.failures > 0) {
    s << what << ": " << r.failures << " of " << r.elements << " elements out of tolerance (abs "
      << tol.abs_tol << ", rel " << tol.rel_tol << "); first at flat index " << r.first_failure
      << ": got " << r.first_got << ", want " << r.first_want;
  } else {
    s << what << ": cosine difference " << r.cos_diff << " > " << tol.cos_tol;
  }
  return ::testing::AssertionFailure() << s.str();
}

}  // namespace dsv4test

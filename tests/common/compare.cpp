// FlashMLA's comparison rule (spec 2.4, tests/kernelkit/compare.py).
#include "compare.h"

#include <cmath>
#include <sstream>

namespace dsv4test {

::testing::AssertionResult compare_close(const std::vector<double>& got,
                                         const std::vector<double>& want, const Tolerance& tol,
                                         const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != reference size " << want.size();
  }
  size_t failures = 0;
  size_t first_failure = 0;
  double dot = 0.0;
  double norm_got = 0.0;
  double norm_want = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i];
    const double b = want[i];
    bool ok;
    if (!std::isfinite(a) || !std::isfinite(b)) {
      // Infinities and NaNs must coincide exactly (same sign for infinities).
      ok = (std::isnan(a) && std::isnan(b)) || (std::isinf(a) && std::isinf(b) && a == b);
    } else {
      const double err = std::fabs(a - b);
      ok = err < tol.abs_tol || (b != 0.0 && err / std::fabs(b) < tol.rel_tol);
      dot += a * b;
      norm_got += a * a;
      norm_want += b * b;
    }
    if (!ok) {
      if (failures == 0) first_failure = i;
      ++failures;
    }
  }
  if (failures > 0) {
    std::ostringstream s;
    s.precision(9);
    s << what << ": " << failures << " of " << got.size() << " elements out of tolerance (abs "
      << tol.abs_tol << ", rel " << tol.rel_tol << "); first at flat index " << first_failure
      << ": got " << got[first_failure] << ", want " << want[first_failure];
    return ::testing::AssertionFailure() << s.str();
  }
  if (tol.cos_tol >= 0) {
    const double denom = norm_got + norm_want;
    const double cos_diff = denom > 0 ? 1.0 - 2.0 * dot / denom : 0.0;
    if (!(cos_diff <= tol.cos_tol)) {
      std::ostringstream s;
      s.precision(9);
      s << what << ": cosine difference " << cos_diff << " > " << tol.cos_tol;
      return ::testing::AssertionFailure() << s.str();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace dsv4test

// FlashMLA's comparison rule (spec 2.4, tests/kernelkit/compare.py).
#include "compare_rule.h"

#include <algorithm>
#include <cmath>

namespace dsv4test {

bool CompareAccumulator::add(double got, double want, const Tolerance& tol) {
  bool ok;
  if (!std::isfinite(got) || !std::isfinite(want)) {
    // Infinities and NaNs must coincide exactly (same sign for infinities).
    ok = (std::isnan(got) && std::isnan(want)) ||
         (std::isinf(got) && std::isinf(want) && got == want);
  } else {
    const double err = std::fabs(got - want);
    const double rel = want != 0.0 ? err / std::fabs(want) : (err > 0 ? HUGE_VAL : 0.0);
    ok = err < tol.abs_tol || rel < tol.rel_tol;
    r_.max_abs_err = std::max(r_.max_abs_err, err);
    if (std::fabs(want) > tol.abs_tol) r_.max_rel_err = std::max(r_.max_rel_err, rel);
    dot_ += got * want;
    norm_got_ += got * got;
    norm_want_ += want * want;
  }
  if (!ok && r_.failures++ == 0) {
    r_.first_failure = r_.elements;
    r_.first_got = got;
    r_.first_want = want;
  }
  ++r_.elements;
  return ok;
}

CompareResult CompareAccumulator::result(const Tolerance& tol) const {
  CompareResult r = r_;
  const double denom = norm_got_ + norm_want_;
  r.cos_diff = denom > 0 ? 1.0 - 2.0 * dot_ / denom : 0.0;
  r.passed = r.failures == 0 && (tol.cos_tol < 0 || r.cos_diff <= tol.cos_tol);
  return r;
}

CompareResult compare_rule(const std::vector<double>& got, const std::vector<double>& want,
                           const Tolerance& tol) {
  CompareAccumulator acc;
  const size_t n = std::min(got.size(), want.size());
  for (size_t i = 0; i < n; ++i) acc.add(got[i], want[i], tol);
  CompareResult r = acc.result(tol);
  if (got.size() != want.size()) r.passed = false;
  return r;
}

}  // namespace dsv4test

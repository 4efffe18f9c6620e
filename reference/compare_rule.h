// FlashMLA's comparison rule (spec 2.4) without GTest, shared by the test suites (compare.h) and
// the `dsv4 run` self-check: inf/NaN positions must coincide; an element passes if
// |a-b| < abs_tol or |a-b|/|b| < rel_tol; and cos_diff = 1 - 2<a,b>/(|a|^2+|b|^2) <= cos_tol.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4test {

struct Tolerance {
  double abs_tol;
  double rel_tol;
  double cos_tol;  // < 0: not checked
};

// Spec 2.4 tolerances (FlashMLA's decode / prefill tests).
constexpr Tolerance kDecodeOutTol{1e-3, 2.01 / 128, 5e-6};
constexpr Tolerance kDecodeLseTol{1e-6, 8.01 / 65536, -1};
constexpr Tolerance kPrefillOutTol{8e-4, 3.01 / 128, 7e-6};
constexpr Tolerance kPrefillLseTol{1e-6, 2.01 / 65536, -1};

struct CompareResult {
  bool passed = true;  // no element failed and the cosine check (if any) held
  int64_t elements = 0;
  int64_t failures = 0;        // elements out of tolerance
  int64_t first_failure = -1;  // index of the first one (-1: none)
  double first_got = 0, first_want = 0;
  double max_abs_err = 0;  // over finite pairs
  double max_rel_err = 0;  // over finite pairs whose |want| exceeds abs_tol
  double cos_diff = 0;     // over finite pairs
};

// Applies the rule to elements given one at a time (for callers that stream their outputs; the
// element tolerances may differ from element to element, e.g. decode vs prefill tokens).
class CompareAccumulator {
 public:
  // Returns whether this element is within tolerance.
  bool add(double got, double want, const Tolerance& tol);
  // The totals so far; the cosine check uses tol.cos_tol.
  CompareResult result(const Tolerance& tol) const;
  int64_t failures() const { return r_.failures; }

 private:
  CompareResult r_;
  double dot_ = 0, norm_got_ = 0, norm_want_ = 0;
};

// The rule over whole arrays of equal size.
CompareResult compare_rule(const std::vector<double>& got, const std::vector<double>& want,
                           const Tolerance& tol);

}  // namespace dsv4test

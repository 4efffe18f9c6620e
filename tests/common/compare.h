// FlashMLA's comparison rule (spec 2.4): inf/NaN positions must coincide; an element passes if
// |a-b| < abs_tol or |a-b|/|b| < rel_tol; and cos_diff = 1 - 2<a,b>/(|a|^2+|b|^2) <= cos_tol.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4test {

struct Tolerance {
  double abs_tol;
  double rel_tol;
  double cos_tol;  // < 0: not checked
};

// Spec 2.4 tolerances.
constexpr Tolerance kDecodeOutTol{1e-3, 2.01 / 128, 5e-6};
constexpr Tolerance kDecodeLseTol{1e-6, 8.01 / 65536, -1};
constexpr Tolerance kPrefillOutTol{8e-4, 3.01 / 128, 7e-6};
constexpr Tolerance kPrefillLseTol{1e-6, 2.01 / 65536, -1};

// Compares `got` against the reference `want`; the message names the first failing element.
::testing::AssertionResult compare_close(const std::vector<double>& got,
                                         const std::vector<double>& want, const Tolerance& tol,
                                         const std::string& what);

}  // namespace dsv4test

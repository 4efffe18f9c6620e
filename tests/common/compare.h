// The spec 2.4 comparison rule (compare_rule.h) as a GoogleTest assertion.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compare_rule.h"

namespace dsv4test {

// Compares `got` against the reference `want`; the message names the first failing element.
::testing::AssertionResult compare_close(const std::vector<double>& got,
                                         const std::vector<double>& want, const Tolerance& tol,
                                         const std::string& what);

}  // namespace dsv4test

// The fixture of the conformance suite: every behaviour the Sandbox
// interface promises, run against every backend (TEST_P over backend names).
#ifndef SANDBOX_TESTS_CONFORMANCE_H_
#define SANDBOX_TESTS_CONFORMANCE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backends.h"
#include "sandbox/sandbox.h"
#include "test_util.h"

namespace sandbox::testing {

// SetUp makes a fresh host workspace and a sandbox rooted there. When the
// backend cannot run here the test is skipped, or fails when
// SANDBOX_REQUIRE_BACKENDS names it.
class ConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SANDBOX_SKIP_UNLESS_AVAILABLE(GetParam());
    workspace_ = std::make_unique<TempDir>();
    auto made = FindBackend(GetParam()).make(workspace_->path());
    ASSERT_TRUE(made.has_value()) << made.error().ToString();
    sandbox_ = std::move(*made);
  }
  void TearDown() override {
    if (sandbox_) {
      EXPECT_TRUE(sandbox_->Close().has_value());
    }
  }

  // The host path of a sandbox-relative path.
  std::string Host(std::string_view relative) const { return workspace_->Join(relative); }

  // Runs `sh -c script` and returns the Result (asserting no Error).
  Result Sh(const std::string& script, Context ctx = {}) {
    auto result = sandbox_->Exec(ctx, Command{.path = "/bin/sh", .args = {"-c", script}});
    EXPECT_TRUE(result.has_value()) << result.error().ToString();
    return result.has_value() ? *result : Result{.exit_code = -1};
  }

  Sandbox& sb() { return *sandbox_; }

  std::unique_ptr<TempDir> workspace_;
  std::unique_ptr<Sandbox> sandbox_;
};

}  // namespace sandbox::testing

// Instantiates a conformance test suite over every backend.
#define SANDBOX_INSTANTIATE_CONFORMANCE(suite)                                        \
  INSTANTIATE_TEST_SUITE_P(AllBackends, suite,                                        \
                           ::testing::ValuesIn(::sandbox::testing::AllBackendNames()), \
                           [](const auto& param_info) { return param_info.param; })

#endif  // SANDBOX_TESTS_CONFORMANCE_H_

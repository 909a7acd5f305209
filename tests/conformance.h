// The fixture of the conformance suite: every behaviour the Sandbox
// interface promises, run against every backend (TEST_P over backend names).
#ifndef SANDBOX_TESTS_CONFORMANCE_H_
#define SANDBOX_TESTS_CONFORMANCE_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

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

  // Processes with an argument exactly `marker`, counted *inside* the sandbox
  // (its /proc), so that it sees what a backend runs where the host cannot
  // (a gVisor sentry, a VM guest). The counting shell builds the marker from
  // two halves, so no process of the count itself carries it. -1 on error.
  int CountInside(const std::string& marker) {
    std::size_t half = marker.size() / 2;
    Result count = Sh("a='" + marker.substr(0, half) + "'; b='" + marker.substr(half) +
                      "'; m=$a$b; n=0; for d in /proc/[0-9]*; do "
                      "tr '\\0' '\\n' < $d/cmdline 2>/dev/null | "
                      "{ f=0; while read -r w; do [ \"$w\" = \"$m\" ] && f=1; done; exit $f; }; "
                      "[ $? = 1 ] && n=$((n+1)); done; echo $n");
    if (count.exit_code != 0 || count.stdout_data.empty()) return -1;
    return std::atoi(count.stdout_data.c_str());
  }

  // Polls CountInside until it is 0 or `timeout_ms` pass; returns the last count.
  int WaitForNoneInside(const std::string& marker, int timeout_ms) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      int n = CountInside(marker);
      if (n == 0 || std::chrono::steady_clock::now() >= until) return n;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  std::unique_ptr<TempDir> workspace_;
  std::unique_ptr<Sandbox> sandbox_;
};

}  // namespace sandbox::testing

// Instantiates a conformance test suite over every backend.
#define SANDBOX_INSTANTIATE_CONFORMANCE(suite)                                         \
  INSTANTIATE_TEST_SUITE_P(AllBackends, suite,                                         \
                           ::testing::ValuesIn(::sandbox::testing::AllBackendNames()), \
                           [](const auto& param_info) { return param_info.param; })

#endif  // SANDBOX_TESTS_CONFORMANCE_H_

// LocalOptions::drop_capabilities: what the agent relies on to make the
// commands it starts as root of a user namespace powerless.
#include <gtest/gtest.h>
#include <unistd.h>

#include "sandbox/local.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

TEST(LocalCapabilities, CommandsStartWithNoCapabilityAtAll) {
  if (geteuid() != 0) GTEST_SKIP() << "needs capabilities to drop: run as root";
  TempDir dir;
  LocalOptions options;
  options.root = dir.path();
  options.drop_capabilities = true;
  auto sb = NewLocalSandbox(options);
  ASSERT_TRUE(sb) << sb.error().ToString();
  auto result = (*sb)->Exec(
      {}, Command{.path = "/bin/sh",
                  .args = {"-c", "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status"}});
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->stdout_data,
            "CapInh:\t0000000000000000\n"
            "CapPrm:\t0000000000000000\n"
            "CapEff:\t0000000000000000\n"
            "CapBnd:\t0000000000000000\n"
            "CapAmb:\t0000000000000000\n");
  // Root without capabilities cannot do what only capabilities allow.
  auto chown = (*sb)->Exec({}, Command{.path = "/bin/sh", .args = {"-c", "touch f && chown 1:1 f"}});
  ASSERT_TRUE(chown);
  EXPECT_NE(chown->exit_code, 0);
}

}  // namespace
}  // namespace sandbox::testing

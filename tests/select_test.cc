// The CLI's backend table: every backend --backend accepts has a row, and
// --isolation picks the fastest available one that gives at least the level,
// never a weaker one.
#include "select.h"

#include <gtest/gtest.h>

#include "backends.h"
#include "flags.h"

namespace sandbox::cli {
namespace {

TEST(BackendTable, HasARowForEveryBackendName) {
  for (std::string_view name : kBackendNames) {
    const BackendOption* option = FindBackendOption(name);
    ASSERT_NE(option, nullptr) << name;
    EXPECT_EQ(option->name, name);
  }
  EXPECT_EQ(FindBackendOption("nope"), nullptr);
  EXPECT_EQ(FindBackendOption("local")->isolation, Isolation::None);
  EXPECT_EQ(FindBackendOption("namespace")->isolation, Isolation::Process);
  EXPECT_EQ(FindBackendOption("gvisor")->isolation, Isolation::Kernel);
  EXPECT_EQ(FindBackendOption("microvm")->isolation, Isolation::VM);
}

TEST(BackendTable, PicksTheFastestThatGivesTheLevel) {
  auto none = PickBackend(Isolation::None);
  ASSERT_TRUE(none);
  EXPECT_EQ(*none, "local");
  auto process = PickBackend(Isolation::Process);
  if (FindBackendOption("namespace")->unavailable_reason().empty()) {
    ASSERT_TRUE(process) << process.error().ToString();
    EXPECT_EQ(*process, "namespace");
  } else {
    ASSERT_FALSE(process);
    EXPECT_EQ(process.error().code(), Error::Code::InsufficientIsolation);
  }
}

TEST(BackendTable, NeverDowngrades) {
  for (Isolation level : {Isolation::Kernel, Isolation::VM}) {
    auto picked = PickBackend(level);
    if (picked) {
      EXPECT_GE(FindBackendOption(*picked)->isolation, level);
      continue;
    }
    EXPECT_EQ(picked.error().code(), Error::Code::InsufficientIsolation);
    EXPECT_EQ(picked.error().message().find("namespace"), std::string::npos)
        << picked.error().message();
    EXPECT_NE(picked.error().message().find("microvm (isolation vm): "), std::string::npos);
  }
}

}  // namespace
}  // namespace sandbox::cli

// Unit tests of the CLI's pure parsing functions (tools/sandbox/flags.h).
#include "flags.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace sandbox::cli {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;

TEST(ParseDurationTest, AcceptsGoStyleDurations) {
  struct Case {
    std::string text;
    nanoseconds want;
  };
  const Case cases[] = {
      {"500ms", milliseconds(500)},
      {"30s", seconds(30)},
      {"5m", minutes(5)},
      {"1h", hours(1)},
      {"1m30s", seconds(90)},
      {"1.5s", milliseconds(1500)},
      {"1h2m3s4ms5us6ns",
       hours(1) + minutes(2) + seconds(3) + milliseconds(4) + microseconds(5) + nanoseconds(6)},
      {"0.5ms", microseconds(500)},
      {".5s", milliseconds(500)},
      {"1.s", seconds(1)},
      {"250us", microseconds(250)},
      {"250\xC2\xB5s", microseconds(250)},
      {"7ns", nanoseconds(7)},
      {"0", nanoseconds(0)},
      {"0s", nanoseconds(0)},
      {"1.000000001s", nanoseconds(1'000'000'001)},
      {"2562047h", hours(2562047)},
  };
  for (const Case& c : cases) {
    auto got = ParseDuration(c.text);
    ASSERT_TRUE(got.has_value()) << c.text << ": " << got.error().message();
    EXPECT_EQ(*got, c.want) << c.text;
  }
}

TEST(ParseDurationTest, RejectsGarbageAndNegativesWithAClearMessage) {
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"", "empty duration: use e.g. 500ms, 30s, 5m or 1h"},
      {"-1s", "negative duration '-1s': a timeout must be positive"},
      {"-0.5s", "negative duration '-0.5s': a timeout must be positive"},
      {"30", "missing unit in duration '30': use e.g. 500ms, 30s, 5m or 1h"},
      {"1m30", "missing unit in duration '1m30': use e.g. 500ms, 30s, 5m or 1h"},
      {"abc", "invalid duration 'abc': use e.g. 500ms, 30s, 5m, 1h or 1m30s"},
      {"+1s", "invalid duration '+1s': use e.g. 500ms, 30s, 5m, 1h or 1m30s"},
      {".s", "invalid duration '.s': use e.g. 500ms, 30s, 5m, 1h or 1m30s"},
      {" 1s", "invalid duration ' 1s': use e.g. 500ms, 30s, 5m, 1h or 1m30s"},
      {"1 s", "unknown unit ' s' in duration '1 s': use ns, us, ms, s, m or h"},
      {"5d", "unknown unit 'd' in duration '5d': use ns, us, ms, s, m or h"},
      {"1S", "unknown unit 'S' in duration '1S': use ns, us, ms, s, m or h"},
      {"3000000h", "duration '3000000h' is too large"},
      {"99999999999999999999s", "duration '99999999999999999999s' is too large"},
      {"2562047h48m", "duration '2562047h48m' is too large"},
  };
  for (const Case& c : cases) {
    auto got = ParseDuration(c.text);
    ASSERT_FALSE(got.has_value()) << c.text;
    EXPECT_EQ(got.error().code(), Error::Code::InvalidArgument) << c.text;
    EXPECT_EQ(got.error().message(), c.message) << c.text;
  }
}

TEST(ParseSizeTest, AcceptsBytesAndBinaryUnits) {
  struct Case {
    std::string text;
    std::uint64_t want;
  };
  const Case cases[] = {
      {"1048576", 1048576},
      {"1", 1},
      {"100b", 100},
      {"512m", 512ULL << 20},
      {"512M", 512ULL << 20},
      {"512mb", 512ULL << 20},
      {"512MiB", 512ULL << 20},
      {"1g", 1ULL << 30},
      {"1G", 1ULL << 30},
      {"1.5g", 3ULL << 29},
      {"64k", 64ULL << 10},
      {"2t", 2ULL << 40},
      {"0.5k", 512},
  };
  for (const Case& c : cases) {
    auto got = ParseSize(c.text);
    ASSERT_TRUE(got.has_value()) << c.text << ": " << got.error().message();
    EXPECT_EQ(*got, c.want) << c.text;
  }
}

TEST(ParseSizeTest, RejectsMalformedSizes) {
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"", "empty size: use e.g. 512m, 1g or 1048576"},
      {"-1m", "negative size '-1m': a size must be positive"},
      {"0", "invalid size '0': must be at least 1 byte"},
      {"0m", "invalid size '0m': must be at least 1 byte"},
      {"m", "invalid size 'm': use e.g. 512m, 1g or 1048576"},
      {"1.5", "invalid size '1.5': a number of bytes must be whole"},
      {"12x", "unknown unit 'x' in size '12x': use b, k, m, g or t (powers of 1024)"},
      {"1 g", "unknown unit ' g' in size '1 g': use b, k, m, g or t (powers of 1024)"},
      {"1g1m", "unknown unit 'g1m' in size '1g1m': use b, k, m, g or t (powers of 1024)"},
      {"99999999999t", "size '99999999999t' is too large"},
      {"99999999999999999999", "size '99999999999999999999' is too large"},
  };
  for (const Case& c : cases) {
    auto got = ParseSize(c.text);
    ASSERT_FALSE(got.has_value()) << c.text;
    EXPECT_EQ(got.error().code(), Error::Code::InvalidArgument) << c.text;
    EXPECT_EQ(got.error().message(), c.message) << c.text;
  }
}

Expected<RunFlags> Parse(std::vector<std::string> args) { return ParseRunFlags(args); }

TEST(ParseRunFlagsTest, DefaultsWithOnlyAProgram) {
  auto flags = Parse({"--", "echo", "hi"});
  ASSERT_TRUE(flags.has_value()) << flags.error().message();
  EXPECT_FALSE(flags->backend.has_value());
  EXPECT_FALSE(flags->isolation.has_value());
  EXPECT_FALSE(flags->workspace.has_value());
  EXPECT_EQ(flags->timeout, nanoseconds(0));
  EXPECT_TRUE(flags->env.empty());
  EXPECT_EQ(flags->dir, "");
  EXPECT_FALSE(flags->network);
  EXPECT_FALSE(flags->memory.has_value());
  EXPECT_FALSE(flags->pids.has_value());
  EXPECT_FALSE(flags->cpus.has_value());
  EXPECT_FALSE(flags->json);
  EXPECT_FALSE(flags->help);
  EXPECT_EQ(flags->program, "echo");
  EXPECT_EQ(flags->args, (std::vector<std::string>{"hi"}));
}

TEST(ParseRunFlagsTest, EveryOptionBothSpellings) {
  for (bool equals : {false, true}) {
    std::vector<std::string> args;
    auto add = [&](const std::string& name, const std::string& value) {
      if (equals) {
        args.push_back(name + "=" + value);
      } else {
        args.push_back(name);
        args.push_back(value);
      }
    };
    add("--backend", "docker");
    add("--isolation", "kernel");
    add("--workspace", "/tmp/ws");
    add("--timeout", "1m30s");
    add("--env", "A=1");
    add("--env", "B=x=y");
    add("--dir", "src");
    add("--rootfs", "/srv/root");
    args.push_back("--network");
    add("--memory", "512m");
    add("--pids", "64");
    add("--cpus", "1.5");
    args.push_back("--json");
    add("--review", "policy.json");
    add("--review-timeout", "2m");
    add("--audit", "audit.jsonl");
    args.insert(args.end(), {"--", "prog", "--json", "--", "x"});
    auto flags = ParseRunFlags(args);
    ASSERT_TRUE(flags.has_value()) << flags.error().message();
    EXPECT_EQ(flags->backend, "docker");
    EXPECT_EQ(flags->isolation, Isolation::Kernel);
    EXPECT_EQ(flags->workspace, "/tmp/ws");
    EXPECT_EQ(flags->timeout, seconds(90));
    EXPECT_EQ(flags->env, (std::vector<std::string>{"A=1", "B=x=y"}));
    EXPECT_EQ(flags->dir, "src");
    EXPECT_EQ(flags->rootfs, "/srv/root");
    EXPECT_TRUE(flags->network);
    EXPECT_EQ(flags->memory, 512ULL << 20);
    EXPECT_EQ(flags->pids, 64U);
    EXPECT_EQ(flags->cpus, 1.5);
    EXPECT_TRUE(flags->json);
    EXPECT_EQ(flags->review, "policy.json");
    EXPECT_EQ(flags->review_timeout, seconds(120));
    EXPECT_EQ(flags->audit, "audit.jsonl");
    EXPECT_EQ(flags->program, "prog");
    EXPECT_EQ(flags->args, (std::vector<std::string>{"--json", "--", "x"}));
  }
}

TEST(ParseRunFlagsTest, ProgramStartsAtFirstNonOption) {
  auto flags = Parse({"--json", "ls", "-l", "--timeout", "1s"});
  ASSERT_TRUE(flags.has_value()) << flags.error().message();
  EXPECT_TRUE(flags->json);
  EXPECT_EQ(flags->timeout, nanoseconds(0));
  EXPECT_EQ(flags->program, "ls");
  EXPECT_EQ(flags->args, (std::vector<std::string>{"-l", "--timeout", "1s"}));
}

TEST(ParseRunFlagsTest, ValueMayStartWithDash) {
  auto flags = Parse({"--dir", "-weird", "--", "true"});
  ASSERT_TRUE(flags.has_value()) << flags.error().message();
  EXPECT_EQ(flags->dir, "-weird");
}

TEST(ParseRunFlagsTest, EnvValueMayBeEmpty) {
  auto flags = Parse({"--env", "EMPTY=", "--", "true"});
  ASSERT_TRUE(flags.has_value()) << flags.error().message();
  EXPECT_EQ(flags->env, (std::vector<std::string>{"EMPTY="}));
}

TEST(ParseRunFlagsTest, HelpNeedsNoProgram) {
  for (const char* help : {"--help", "-h"}) {
    auto flags = Parse({"--json", help});
    ASSERT_TRUE(flags.has_value()) << flags.error().message();
    EXPECT_TRUE(flags->help);
    EXPECT_EQ(flags->program, "");
  }
}

TEST(ParseRunFlagsTest, LaterValueWins) {
  auto flags = Parse({"--timeout", "1s", "--timeout", "2s", "true"});
  ASSERT_TRUE(flags.has_value()) << flags.error().message();
  EXPECT_EQ(flags->timeout, seconds(2));
}

TEST(ParseRunFlagsTest, Errors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string nul_env("--env=A=\0b", 10);
  const Case cases[] = {
      {{}, "missing PROGRAM: usage: sandbox run [OPTIONS] -- PROGRAM [ARGS...]"},
      {{"--json"}, "missing PROGRAM: usage: sandbox run [OPTIONS] -- PROGRAM [ARGS...]"},
      {{"--"}, "missing PROGRAM after --: usage: sandbox run [OPTIONS] -- PROGRAM [ARGS...]"},
      {{"--nope", "--", "true"}, "unknown option '--nope' (see `sandbox run --help`)"},
      {{"--nope=1", "--", "true"}, "unknown option '--nope' (see `sandbox run --help`)"},
      {{"-x", "true"}, "unknown option '-x' (see `sandbox run --help`)"},
      {{"--backend", "kvm", "true"},
       "unknown backend 'kvm': expected local, namespace, docker, gvisor or microvm"},
      {{"--isolation", "strong", "true"},
       "--isolation: unknown isolation level 'strong': expected none, process, kernel or vm"},
      {{"--timeout", "10", "true"},
       "--timeout: missing unit in duration '10': use e.g. 500ms, 30s, 5m or 1h"},
      {{"--timeout", "-1s", "true"},
       "--timeout: negative duration '-1s': a timeout must be positive"},
      {{"--timeout"}, "--timeout needs a value, e.g. --timeout 30s"},
      {{"--timeout="}, "--timeout needs a non-empty value, e.g. --timeout 30s"},
      {{"--workspace", "", "true"},
       "--workspace needs a non-empty value, e.g. --workspace ./project"},
      {{"--env", "NOEQUALS", "true"}, "--env 'NOEQUALS' is not KEY=VALUE"},
      {{"--env", "=value", "true"}, "--env '=value' has an empty KEY"},
      {{nul_env, "true"}, "--env entry contains a NUL byte"},
      {{"--memory", "lots", "true"}, "--memory: invalid size 'lots': use e.g. 512m, 1g or 1048576"},
      {{"--pids", "0", "true"}, "--pids: invalid number '0': must be at least 1"},
      {{"--pids", "1.5", "true"}, "--pids: invalid number '1.5': expected a positive whole number"},
      {{"--pids", "-3", "true"}, "--pids: invalid number '-3': expected a positive whole number"},
      {{"--cpus", "0", "true"}, "--cpus: invalid number '0': must be greater than 0"},
      {{"--cpus", "-1", "true"}, "--cpus: invalid number '-1': must be greater than 0"},
      {{"--cpus", "fast", "true"},
       "--cpus: invalid number 'fast': expected a positive number such as 1.5"},
      {{"--cpus", "inf", "true"},
       "--cpus: invalid number 'inf': expected a positive number such as 1.5"},
      {{"--json=1", "true"}, "--json takes no value"},
      {{"--review", "", "true"}, "--review needs a non-empty value, e.g. --review policy.json"},
      {{"--audit"}, "--audit needs a value, e.g. --audit audit.jsonl"},
      {{"--review-timeout", "0", "true"}, "--review-timeout must be more than 0"},
      {{"--review-timeout", "soon", "true"},
       "--review-timeout: invalid duration 'soon': use e.g. 500ms, 30s, 5m, 1h or 1m30s"},
      {{"--network=off", "true"}, "--network takes no value"},
  };
  for (const Case& c : cases) {
    auto flags = ParseRunFlags(c.args);
    std::string joined;
    for (const auto& arg : c.args) joined += "[" + arg + "]";
    ASSERT_FALSE(flags.has_value()) << joined;
    EXPECT_EQ(flags.error().code(), Error::Code::InvalidArgument) << joined;
    EXPECT_EQ(flags.error().message(), c.message) << joined;
  }
}

TEST(RunUsageTest, StartsWithTheContractLine) {
  EXPECT_TRUE(RunUsage().starts_with("usage: sandbox run [OPTIONS] -- PROGRAM [ARGS...]\n"));
  EXPECT_TRUE(RunUsage().ends_with("\n"));
}

}  // namespace
}  // namespace sandbox::cli

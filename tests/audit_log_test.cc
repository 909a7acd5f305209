// The audit log: one valid JSON object per line, every string escaped to
// printable ASCII, lines never interleaved, rotation bounding its size.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/audit.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated line";
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

AuditRecord ExecRecord(std::vector<std::string> argv) {
  AuditRecord record;
  record.event = "operation";
  record.sandbox_id = "sb";
  record.backend = "local";
  record.operation = "exec";
  record.argv = std::move(argv);
  record.exit_code = 0;
  return record;
}

TEST(AuditLog, OneValidJsonLinePerRecordWithExactFields) {
  TempDir dir;
  auto log = AuditLog::Open({.path = dir.Join("a.jsonl")});
  ASSERT_TRUE(log) << log.error().ToString();
  AuditRecord record = ExecRecord({"echo", "hi"});
  record.duration = std::chrono::microseconds(1500);
  record.timed_out = false;
  record.stdout_truncated = true;
  record.stderr_truncated = false;
  ASSERT_TRUE((*log)->Write(record));
  AuditRecord decision;
  decision.event = "decision";
  decision.sandbox_id = "sb";
  decision.operation = "write_file";
  decision.path = "src/x";
  decision.decision = "deny";
  decision.reviewer = "rules";
  decision.reason = "no";
  ASSERT_TRUE((*log)->Write(decision));
  auto lines = Lines(ReadHostFile(dir.Join("a.jsonl")));
  ASSERT_EQ(lines.size(), 2u);
  auto first = nlohmann::json::parse(lines[0]);
  first.erase("time");
  EXPECT_EQ(first, nlohmann::json::parse(R"({"event":"operation","sandbox":"sb","backend":"local",
      "operation":"exec","argv":["echo","hi"],"dir":"","exit_code":0,"duration_ms":1.5,
      "timed_out":false,"stdout_truncated":true,"stderr_truncated":false})"));
  auto second = nlohmann::json::parse(lines[1]);
  EXPECT_TRUE(std::string(second["time"]).ends_with("Z"));
  EXPECT_EQ(std::string(second["time"]).size(), std::string("2026-12-01T05:10:00.123Z").size());
  second.erase("time");
  EXPECT_EQ(second, nlohmann::json::parse(R"({"event":"decision","sandbox":"sb",
      "operation":"write_file","path":"src/x","decision":"deny","reviewer":"rules","reason":"no"})"));
}

TEST(AuditLog, ControlCharactersAndNonAsciiAreEscaped) {
  TempDir dir;
  auto log = AuditLog::Open({.path = dir.Join("a.jsonl")});
  ASSERT_TRUE(log);
  const std::string hostile = "\x1b[2J\x1b]0;owned\x07\r\nfake line\x7f\xc2\x9b\xe2\x80\xae\xff";
  ASSERT_TRUE((*log)->Write(ExecRecord({"echo", hostile})));
  const std::string text = ReadHostFile(dir.Join("a.jsonl"));
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  for (std::size_t i = 0; i + 1 < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c) << " at " << i << " in " << text;
  }
  auto lines = Lines(text);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(
      lines[0].find(R"("\u001b[2J\u001b]0;owned\u0007\r\nfake line\u007f\u009b\u202e\ufffd")"),
      std::string::npos)
      << lines[0];
  // Invalid UTF-8 became U+FFFD; everything else reads back as written.
  EXPECT_EQ(nlohmann::json::parse(lines[0])["argv"][1],
            hostile.substr(0, hostile.size() - 1) + "\xef\xbf\xbd");
}

TEST(AuditLog, LongFieldsAndArgvAreCut) {
  TempDir dir;
  auto log = AuditLog::Open({.path = dir.Join("a.jsonl"), .max_field_bytes = 8, .max_argv = 2});
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->Write(ExecRecord({"0123456789", "b", "c"})));
  auto line = nlohmann::json::parse(Lines(ReadHostFile(dir.Join("a.jsonl"))).at(0));
  EXPECT_EQ(line["argv"], nlohmann::json({"01234567...[2 more bytes]", "b"}));
  EXPECT_EQ(line["argv_omitted"], 1);
}

TEST(AuditLog, RotatesAtTheBoundAndKeepsOnlyNFiles) {
  TempDir dir;
  const std::string path = dir.Join("a.jsonl");
  auto log = AuditLog::Open({.path = path, .max_bytes = 4096, .keep_rotated = 2});
  ASSERT_TRUE(log);
  const int kRecords = 200;
  for (int i = 0; i < kRecords; ++i)
    ASSERT_TRUE((*log)->Write(ExecRecord({"echo", "record-" + std::to_string(i)})));
  ASSERT_TRUE(HostPathExists(path));
  ASSERT_TRUE(HostPathExists(path + ".1"));
  ASSERT_TRUE(HostPathExists(path + ".2"));
  EXPECT_FALSE(HostPathExists(path + ".3"));
  // Every file is within the bound, holds whole lines, and together the
  // newest records are kept in order, ending with the last one.
  std::vector<std::string> kept;
  for (const std::string& file : {path + ".2", path + ".1", path}) {
    std::string text = ReadHostFile(file);
    EXPECT_LE(text.size(), 4096u) << file;
    for (const std::string& line : Lines(text))
      kept.push_back(nlohmann::json::parse(line)["argv"][1]);
  }
  ASSERT_GT(kept.size(), 20u);
  ASSERT_LT(kept.size(), static_cast<std::size_t>(kRecords));
  const int first = kRecords - static_cast<int>(kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i)
    EXPECT_EQ(kept[i], "record-" + std::to_string(first + static_cast<int>(i)));
}

TEST(AuditLog, AppendsToAnExistingLogAndCountsItsSize) {
  TempDir dir;
  const std::string path = dir.Join("a.jsonl");
  WriteHostFile(path, std::string(4000, 'x') + "\n");
  auto log = AuditLog::Open({.path = path, .max_bytes = 4096, .keep_rotated = 1});
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->Write(ExecRecord({"true"})));
  EXPECT_EQ(ReadHostFile(path + ".1"), std::string(4000, 'x') + "\n");
  EXPECT_EQ(Lines(ReadHostFile(path)).size(), 1u);
}

TEST(AuditLog, ConcurrentWritersNeverInterleave) {
  TempDir dir;
  auto log = AuditLog::Open({.path = dir.Join("a.jsonl")});
  ASSERT_TRUE(log);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i)
        EXPECT_TRUE(
            (*log)->Write(ExecRecord({"echo", std::string(500, static_cast<char>('a' + t))})));
    });
  for (auto& thread : threads) thread.join();
  auto lines = Lines(ReadHostFile(dir.Join("a.jsonl")));
  ASSERT_EQ(lines.size(), 400u);
  for (const auto& line : lines) EXPECT_NO_THROW(nlohmann::json::parse(line));
}

TEST(AuditLog, RefusesASymlinkAndBadOptions) {
  TempDir dir;
  const std::string target = dir.Join("target");
  WriteHostFile(target, "");
  ASSERT_EQ(symlink(target.c_str(), dir.Join("link").c_str()), 0);
  auto linked = AuditLog::Open({.path = dir.Join("link")});
  ASSERT_FALSE(linked);
  EXPECT_EQ(linked.error().message(), "cannot open the audit log: open '" + dir.Join("link") +
                                          "': Too many levels of symbolic links");
  auto missing_dir = AuditLog::Open({.path = dir.Join("no/such/a.jsonl")});
  ASSERT_FALSE(missing_dir);
  EXPECT_EQ(missing_dir.error().code(), Error::Code::NotFound);
  ASSERT_EQ(mkfifo(dir.Join("fifo").c_str(), 0600), 0);
  auto fifo = AuditLog::Open({.path = dir.Join("fifo")});  // returns, never blocks
  ASSERT_FALSE(fifo);
  EXPECT_FALSE(AuditLog::Open({.path = ""}));
  EXPECT_FALSE(AuditLog::Open({.path = dir.Join("x"), .max_bytes = 100}));
}

}  // namespace
}  // namespace sandbox::testing

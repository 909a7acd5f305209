// The rules reviewer: policy parsing (malformed files refused whole, with the
// line), first-match-wins order, program/argument/path patterns, defaults.
#include <gtest/gtest.h>

#include <string>

#include "gated/text.h"
#include "sandbox/gated.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

std::shared_ptr<Reviewer> Rules(std::string_view text, std::shared_ptr<Reviewer> ask = nullptr) {
  auto reviewer = ParseRulesReviewer(text, "policy.json", std::move(ask));
  EXPECT_TRUE(reviewer) << reviewer.error().ToString();
  return reviewer ? *reviewer : nullptr;
}

Decision ReviewExec(Reviewer& reviewer, const Command& command) {
  ReviewRequest request;
  request.operation = Operation::Exec;
  request.command = &command;
  auto decision = reviewer.Review(Context::WithTimeout(std::chrono::seconds(5)), request);
  EXPECT_TRUE(decision) << decision.error().ToString();
  return decision ? *decision : Decision::Deny("review failed");
}

Decision ReviewFile(Reviewer& reviewer, Operation operation, std::string_view path,
                    std::string_view workdir = "") {
  ReviewRequest request;
  request.operation = operation;
  request.path = path;
  request.workdir = workdir;
  auto decision = reviewer.Review(Context::WithTimeout(std::chrono::seconds(5)), request);
  EXPECT_TRUE(decision) << decision.error().ToString();
  return decision ? *decision : Decision::Deny("review failed");
}

using Verdict = Decision::Verdict;

constexpr std::string_view kPolicy = R"({
  "version": 1,
  "comment": "first match wins",
  "default": "deny",
  "default_reason": "not on the list",
  "rules": [
    {"action": "deny", "program": "rm", "any_arg": ["-*r*", "--recursive"], "reason": "no recursive rm"},
    {"action": "allow", "program": ["rm", "ls", "cat", "py*"]},
    {"action": "allow", "program": "git", "args": ["status"]},
    {"action": "deny", "program": "git", "args": ["push", "*"], "reason": "no push"},
    {"action": "allow", "program": "/opt/tools/*"},
    {"action": "deny", "operations": ["write_file", "append_file"], "path": "secrets/**"},
    {"action": "allow", "operations": ["write_file", "append_file", "make_dir_all"], "path": ["src/**", "*.md"]},
    {"action": "allow", "operations": ["remove"]}
  ]
})";

TEST(RulesReviewer, FirstMatchingRuleWins) {
  auto rules = Rules(kPolicy);
  ASSERT_TRUE(rules);
  // Rule 1 comes before rule 2, which would allow rm.
  Decision recursive = ReviewExec(*rules, {.path = "rm", .args = {"-fr", "x"}});
  EXPECT_EQ(recursive.verdict, Verdict::Deny);
  EXPECT_EQ(recursive.reason, "no recursive rm [rule 1 of policy.json, line 7]");
  Decision plain = ReviewExec(*rules, {.path = "rm", .args = {"x"}});
  EXPECT_EQ(plain.verdict, Verdict::Allow);
  EXPECT_EQ(plain.reason, "allowed by rule 2 of policy.json, line 8");
  EXPECT_EQ(ReviewExec(*rules, {.path = "rm", .args = {"--recursive", "x"}}).verdict,
            Verdict::Deny);
}

TEST(RulesReviewer, ProgramPatternWithoutSlashMatchesTheBasenameAnywhere) {
  auto rules = Rules(kPolicy);
  ASSERT_TRUE(rules);
  EXPECT_EQ(ReviewExec(*rules, {.path = "/bin/rm", .args = {"-r", "/"}}).verdict, Verdict::Deny);
  EXPECT_EQ(ReviewExec(*rules, {.path = "../../usr/bin/rm", .args = {"-rf"}}).verdict,
            Verdict::Deny);
  EXPECT_EQ(ReviewExec(*rules, {.path = "/usr/bin/python3"}).verdict, Verdict::Allow);
  // A pattern with a slash matches the whole path.
  EXPECT_EQ(ReviewExec(*rules, {.path = "/opt/tools/lint"}).verdict, Verdict::Allow);
  EXPECT_EQ(ReviewExec(*rules, {.path = "lint"}).verdict, Verdict::Deny);
}

TEST(RulesReviewer, ArgsMatchTheLeadingArgumentsPositionally) {
  auto rules = Rules(kPolicy);
  ASSERT_TRUE(rules);
  EXPECT_EQ(ReviewExec(*rules, {.path = "git", .args = {"status"}}).verdict, Verdict::Allow);
  EXPECT_EQ(ReviewExec(*rules, {.path = "git", .args = {"status", "--short"}}).verdict,
            Verdict::Allow);
  Decision push = ReviewExec(*rules, {.path = "git", .args = {"push", "origin"}});
  EXPECT_EQ(push.verdict, Verdict::Deny);
  EXPECT_EQ(push.reason, "no push [rule 4 of policy.json, line 10]");
  // "push" alone has no second argument for "*": rule 4 does not match; the
  // default decides.
  Decision bare = ReviewExec(*rules, {.path = "git", .args = {"push"}});
  EXPECT_EQ(bare.verdict, Verdict::Deny);
  EXPECT_EQ(bare.reason, "not on the list [the default of policy.json]");
}

TEST(RulesReviewer, PathPatternsMatchTheNormalizedPath) {
  auto rules = Rules(kPolicy);
  ASSERT_TRUE(rules);
  EXPECT_EQ(ReviewFile(*rules, Operation::WriteFile, "src/a/b.cc").verdict, Verdict::Allow);
  EXPECT_EQ(ReviewFile(*rules, Operation::WriteFile, "README.md").verdict, Verdict::Allow);
  // '*' does not cross '/', '**' does.
  EXPECT_EQ(ReviewFile(*rules, Operation::WriteFile, "docs/x.md").verdict, Verdict::Deny);
  EXPECT_EQ(ReviewFile(*rules, Operation::WriteFile, "secrets/key").verdict, Verdict::Deny);
  // Spellings that reach the same path are the same path.
  EXPECT_EQ(ReviewFile(*rules, Operation::AppendFile, "./src/../secrets//key").verdict,
            Verdict::Deny);
  EXPECT_EQ(ReviewFile(*rules, Operation::AppendFile, "src/../secrets/key").verdict, Verdict::Deny);
  EXPECT_EQ(ReviewFile(*rules, Operation::WriteFile, "/work/space/src/x", "/work/space").verdict,
            Verdict::Allow);
  EXPECT_EQ(
      ReviewFile(*rules, Operation::WriteFile, "/work/space/secrets/x", "/work/space").verdict,
      Verdict::Deny);
  // Operations narrow a rule: make_dir_all is allowed under src/, remove anywhere.
  EXPECT_EQ(ReviewFile(*rules, Operation::MakeDirAll, "src/new").verdict, Verdict::Allow);
  EXPECT_EQ(ReviewFile(*rules, Operation::MakeDirAll, "secrets/new").verdict, Verdict::Deny);
  EXPECT_EQ(ReviewFile(*rules, Operation::Remove, "secrets/key").verdict, Verdict::Allow);
}

TEST(RulesReviewer, ExecRulesNeverMatchFileOperationsAndPathRulesNeverMatchExec) {
  auto rules = Rules(R"({"version": 1, "default": "deny", "rules": [
      {"action": "allow", "program": "*"},
      {"action": "allow", "path": "**"}]})");
  ASSERT_TRUE(rules);
  Decision exec = ReviewExec(*rules, {.path = "anything"});
  EXPECT_EQ(exec.reason, "allowed by rule 1 of policy.json, line 2");
  Decision write = ReviewFile(*rules, Operation::WriteFile, "x");
  EXPECT_EQ(write.reason, "allowed by rule 2 of policy.json, line 3");
}

TEST(RulesReviewer, DefaultDecidesWhenNoRuleMatches) {
  auto allow = Rules(R"({"version": 1, "default": "allow"})");
  ASSERT_TRUE(allow);
  Decision decision = ReviewExec(*allow, {.path = "rm", .args = {"-rf", "/"}});
  EXPECT_EQ(decision.verdict, Verdict::Allow);
  EXPECT_EQ(decision.reason, "allowed by the default of policy.json");
  auto deny = Rules(R"({"version": 1, "default": "deny", "rules": []})");
  ASSERT_TRUE(deny);
  decision = ReviewExec(*deny, {.path = "ls"});
  EXPECT_EQ(decision.verdict, Verdict::Deny);
  EXPECT_EQ(decision.reason, "denied by the default of policy.json");
}

TEST(RulesReviewer, AskGoesToTheAskReviewerOrDeniesWithoutOne) {
  constexpr std::string_view kAsk =
      R"({"version": 1, "default": "ask", "rules": [{"action": "ask", "program": "curl", "reason": "network"}]})";
  auto alone = Rules(kAsk);
  ASSERT_TRUE(alone);
  Decision denied = ReviewExec(*alone, {.path = "curl"});
  EXPECT_EQ(denied.verdict, Verdict::Deny);
  EXPECT_EQ(denied.reason,
            "rule 1 of policy.json, line 1 says to ask a person, but no one can be asked here: "
            "network");
  int asked = 0;
  auto person = NewCallbackReviewer(
      [&](const Context&, const ReviewRequest& request) {
        ++asked;
        EXPECT_EQ(request.command->path, "curl");
        return Decision::AllowRemember("ok by me");
      },
      "person");
  auto with_person = Rules(kAsk, person);
  ASSERT_TRUE(with_person);
  Decision allowed = ReviewExec(*with_person, {.path = "curl"});
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(allowed.verdict, Verdict::AllowRemember);
  EXPECT_EQ(allowed.reason, "ok by me");
  EXPECT_EQ(allowed.decided_by, "person");
}

struct MalformedCase {
  std::string text;
  std::string error;
};

class RulesMalformedTest : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(RulesMalformedTest, IsRefusedWholeWithTheLine) {
  auto reviewer = ParseRulesReviewer(GetParam().text, "p.json");
  ASSERT_FALSE(reviewer) << "accepted: " << GetParam().text;
  EXPECT_EQ(reviewer.error().code(), Error::Code::InvalidArgument);
  EXPECT_EQ(reviewer.error().message(), GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RulesMalformedTest,
    ::testing::Values(
        MalformedCase{"{\"version\": 1,\n \"default\": \"deny\",\n \"rules\": [\n  {\"action\": "
                      "\"allow\",}\n]}",
                      "p.json:4:22: invalid JSON: syntax error while parsing object key - "
                      "unexpected '}'; expected string literal"},
        MalformedCase{"",
                      "p.json:1:1: invalid JSON: syntax error while parsing value - unexpected "
                      "end of input; expected '[', '{', or a literal"},
        MalformedCase{
            "[]",
            "p.json:1: a policy is a JSON object with \"version\", \"default\" and \"rules\""},
        MalformedCase{"{\"default\": \"deny\"}", "p.json:1: missing \"version\": 1"},
        MalformedCase{"{\"version\": 2, \"default\": \"deny\"}",
                      "p.json:1: unsupported \"version\": this sandbox reads version 1"},
        MalformedCase{"{\"version\": 1}",
                      "p.json:1: missing \"default\": \"allow\", \"deny\" or \"ask\" (what happens "
                      "when no rule matches)"},
        MalformedCase{"{\"version\": 1,\n\"default\": \"maybe\"}",
                      "p.json:2: \"default\" must be \"allow\", \"deny\" or \"ask\""},
        MalformedCase{"{\"version\": 1,\n\"default\": \"deny\",\n\"rulez\": []}",
                      "p.json:3: unknown key 'rulez' (expected version, default, default_reason, "
                      "rules, comment)"},
        MalformedCase{"{\"version\": 1, \"default\": \"deny\", \"rules\": [\n"
                      "  {\"action\": \"allow\", \"program\": \"ls\"},\n"
                      "  {\"action\": \"allow\",\n   \"progam\": \"rm\"}\n]}",
                      "p.json:4: rule 2: unknown key 'progam' (expected action, operations, "
                      "program, args, any_arg, path, reason, comment)"},
        MalformedCase{"{\"version\": 1, \"default\": \"deny\", \"rules\": [\n"
                      "  {\"program\": \"ls\"}\n]}",
                      "p.json:2: rule 1: missing \"action\""},
        MalformedCase{"{\"version\": 1, \"default\": \"deny\", \"rules\": [\n\n"
                      "  {\"action\": \"allow\", \"program\": \"ls\", \"path\": \"x\"}]}",
                      "p.json:3: rule 1: a rule matches a program or a path, not both (program, "
                      "args and any_arg are for exec; path is for file operations)"},
        MalformedCase{"{\"version\": 1, \"default\": \"deny\", \"rules\": [\n"
                      "  {\"action\": \"allow\",\n \"operations\": [\"exec\", \"chmod\"]}]}",
                      "p.json:3: rule 1: unknown operation 'chmod' (expected exec, write_file, "
                      "append_file, remove, make_dir_all)"},
        MalformedCase{
            "{\"version\": 1, \"default\": \"deny\", \"rules\": [\n"
            "  {\"action\": \"allow\", \"program\": \"ls\",\n \"operations\": [\"remove\"]}]}",
            "p.json:3: rule 1: program, args and any_arg only match exec, but the rule "
            "lists 'remove'"},
        MalformedCase{"{\"version\": 1, \"default\": \"deny\", \"rules\": [\n"
                      "  {\"action\": \"allow\", \"program\": []}]}",
                      "p.json:2: rule 1: \"program\" must not be an empty array"},
        MalformedCase{"{\"version\": 1, \"default\": \"deny\", \"rules\": [\n"
                      "  {\"action\": \"allow\", \"program\": 7}]}",
                      "p.json:2: rule 1: \"program\" must be a string or an array of strings"},
        MalformedCase{"{\"version\": 1, \"default\": \"deny\", \"rules\": [\n"
                      "  {\"action\": \"deny\",\n   \"action\": \"allow\"}]}",
                      "p.json:3: key 'action' appears twice in one object"},
        MalformedCase{"{\"version\": 1, \"default\": \"deny\", \"rules\": {}}",
                      "p.json:1: \"rules\" must be an array of objects"},
        MalformedCase{"{\"version\": 1, \"default\": \"deny\", \"rules\": [\n 3]}",
                      "p.json:2: rule 1 must be an object"}));

TEST(RulesReviewer, LoadRefusesMissingFilesAndNonRegularFiles) {
  auto missing = LoadRulesReviewer("/nonexistent/policy.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Error::Code::NotFound);
  EXPECT_EQ(missing.error().message(),
            "cannot read the review policy: open '/nonexistent/policy.json': No such file or "
            "directory");
  auto directory = LoadRulesReviewer("/tmp");
  ASSERT_FALSE(directory);
  EXPECT_EQ(directory.error().message(), "the review policy '/tmp' is not a regular file");
  TempDir dir;
  WriteHostFile(dir.Join("p.json"), R"({"version": 1, "default": "allow"})");
  EXPECT_TRUE(LoadRulesReviewer(dir.Join("p.json")));
  WriteHostFile(dir.Join("big.json"), std::string((1 << 20) + 1, ' '));
  auto big = LoadRulesReviewer(dir.Join("big.json"));
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code(), Error::Code::TooLarge);
}

TEST(RulesReviewer, HugeAndDeeplyNestedPoliciesAreRefusedWithoutCrashing) {
  const std::string deep = "{\"version\": 1, \"default\": \"deny\", \"rules\": [" +
                           std::string(200000, '[') + std::string(200000, ']') + "]}";
  auto nested = ParseRulesReviewer(deep, "p.json");
  ASSERT_FALSE(nested);
  EXPECT_EQ(nested.error().message(), "p.json:1: rule 1 must be an object");
  std::string many = "{\"version\": 1, \"default\": \"deny\", \"rules\": [\n";
  for (int i = 0; i < 20000; ++i) many += "{\"action\": \"allow\", \"program\": \"p\"},\n";
  many += "{\"action\": \"nope\"}]}";
  auto last_bad = ParseRulesReviewer(many, "p.json");
  ASSERT_FALSE(last_bad);
  EXPECT_EQ(last_bad.error().message(),
            "p.json:20002: rule 20001: \"action\" must be \"allow\", \"deny\" or \"ask\"");
}

TEST(GatedText, GlobMatching) {
  using gated::GlobMatch;
  using gated::GlobMode;
  EXPECT_TRUE(GlobMatch("a*c", "abbbc", GlobMode::kText));
  EXPECT_TRUE(GlobMatch("a*c", "a/b/c", GlobMode::kText));
  EXPECT_FALSE(GlobMatch("a*c", "a/b/c", GlobMode::kPath));
  EXPECT_TRUE(GlobMatch("a/**", "a/b/c", GlobMode::kPath));
  EXPECT_TRUE(GlobMatch("**/x", "a/b/x", GlobMode::kPath));
  EXPECT_FALSE(GlobMatch("a/?", "a//", GlobMode::kPath));
  EXPECT_TRUE(GlobMatch("a?c", "abc", GlobMode::kText));
  EXPECT_FALSE(GlobMatch("a?c", "ac", GlobMode::kText));
  EXPECT_TRUE(GlobMatch("\\*", "*", GlobMode::kText));
  EXPECT_FALSE(GlobMatch("\\*", "x", GlobMode::kText));
  EXPECT_TRUE(GlobMatch("", "", GlobMode::kText));
  EXPECT_FALSE(GlobMatch("", "x", GlobMode::kText));
  // Quadratic, not exponential: this returns at once.
  EXPECT_FALSE(GlobMatch(std::string(200, '*') + "b", std::string(10000, 'a'), GlobMode::kText));
}

TEST(GatedText, NormalizePath) {
  using gated::NormalizePath;
  EXPECT_EQ(NormalizePath("", ""), ".");
  EXPECT_EQ(NormalizePath("./", ""), ".");
  EXPECT_EQ(NormalizePath("a//b/./c/../d", ""), "a/b/d");
  EXPECT_EQ(NormalizePath("../x", ""), "../x");
  EXPECT_EQ(NormalizePath("a/../../x", ""), "../x");
  EXPECT_EQ(NormalizePath("/w/s/a", "/w/s"), "a");
  EXPECT_EQ(NormalizePath("/w/s", "/w/s/"), ".");
  EXPECT_EQ(NormalizePath("/w/sx/a", "/w/s"), "/w/sx/a");
  EXPECT_EQ(NormalizePath("/../etc", ""), "/etc");
}

TEST(GatedText, QuoteForTerminalEscapesEverythingATerminalWouldInterpret) {
  using gated::QuoteForTerminal;
  EXPECT_EQ(QuoteForTerminal("ls", 100), "ls");
  EXPECT_EQ(QuoteForTerminal("", 100), "$''");
  EXPECT_EQ(QuoteForTerminal("a b", 100), "$'a b'");
  EXPECT_EQ(QuoteForTerminal("it's", 100), "$'it\\'s'");
  EXPECT_EQ(QuoteForTerminal("\x1b[2J\x1b]0;title\x07", 100), "$'\\e[2J\\e]0;title\\x07'");
  EXPECT_EQ(QuoteForTerminal("a\nb\rc\td\x7f", 100), "$'a\\nb\\rc\\td\\x7F'");
  // C1 control CSI (U+009B), an invalid byte, a right-to-left override.
  EXPECT_EQ(QuoteForTerminal("\xc2\x9b"
                             "2J",
                             100),
            "$'\\xC2\\x9B2J'");
  EXPECT_EQ(QuoteForTerminal("\xff", 100), "$'\\xFF'");
  EXPECT_EQ(QuoteForTerminal("x\xe2\x80\xaey", 100), "$'x\\u202Ey'");
  // Printable UTF-8 stays readable.
  EXPECT_EQ(QuoteForTerminal("caf\xc3\xa9", 100), "$'caf\xc3\xa9'");
  EXPECT_EQ(QuoteForTerminal("abcdef", 3), "abc [... 3 more bytes not shown]");
}

}  // namespace
}  // namespace sandbox::testing

// The rules reviewer: a JSON policy file (docs/review-policy.md) applied
// first-match-wins. Parsing tracks the line of every rule and key so that a
// malformed policy is refused with the line to fix.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gated/text.h"
#include "os/syscalls.h"
#include "sandbox/gated.h"

namespace sandbox {
namespace {

using Json = nlohmann::json;

constexpr std::size_t kMaxPolicyBytes = std::size_t{1} << 20;

enum class Action { kAllow, kDeny, kAsk };

struct Rule {
  int number = 0;  // 1-based, as in messages
  int line = 0;
  Action action = Action::kDeny;
  std::vector<Operation> operations;  // empty: every operation the rule can match
  std::vector<std::string> programs;
  std::vector<std::string> args;     // leading arguments, position by position
  std::vector<std::string> any_arg;  // some argument matches one of these
  std::vector<std::string> paths;
  std::string reason;

  bool is_exec_rule() const { return !programs.empty() || !args.empty() || !any_arg.empty(); }
  bool is_path_rule() const { return !paths.empty(); }
};

struct Policy {
  std::string source;
  Action default_action = Action::kDeny;
  std::string default_reason;
  std::vector<Rule> rules;
};

// An input iterator over the policy text that remembers the furthest byte
// the JSON lexer has read, so the parse callback knows the current line.
class TrackingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* position, const char** furthest)
      : position_(position), furthest_(furthest) {}
  reference operator*() const {
    if (position_ > *furthest_) *furthest_ = position_;
    return *position_;
  }
  TrackingIterator& operator++() {
    ++position_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator old = *this;
    ++position_;
    return old;
  }
  friend bool operator==(const TrackingIterator& a, const TrackingIterator& b) {
    return a.position_ == b.position_;
  }

 private:
  const char* position_;
  const char** furthest_;
};

int LineAt(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  int line = 1;
  for (std::size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') ++line;
  return line;
}

// Where each rule and each key was seen.
struct Locations {
  std::map<std::string, int> top_keys;
  std::vector<int> rule_lines;
  std::vector<std::map<std::string, int>> rule_keys;
};

class PolicyParser {
 public:
  PolicyParser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  Expected<Policy> Parse() {
    Json document;
    Locations where;
    const char* furthest = text_.data();
    std::string current_top_key;
    std::vector<std::set<std::string>> open_objects;
    std::optional<Error> duplicate;
    // The lexer only moves forward: count newlines incrementally, so a big
    // policy costs linear time.
    std::size_t counted = 0;
    int current_line = 1;
    auto line_now = [&] {
      const std::size_t offset =
          std::min(static_cast<std::size_t>(furthest - text_.data()), text_.size());
      for (; counted < offset; ++counted)
        if (text_[counted] == '\n') ++current_line;
      return current_line;
    };
    auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) -> bool {
      switch (event) {
        case Json::parse_event_t::object_start:
          open_objects.emplace_back();
          if (depth == 2 && current_top_key == "rules") {
            where.rule_lines.push_back(line_now());
            where.rule_keys.emplace_back();
          }
          break;
        case Json::parse_event_t::array_start:
        case Json::parse_event_t::value:
          // A rule that is not an object still gets its line.
          if (depth == 2 && current_top_key == "rules") {
            where.rule_lines.push_back(line_now());
            where.rule_keys.emplace_back();
          }
          break;
        case Json::parse_event_t::object_end:
          if (!open_objects.empty()) open_objects.pop_back();
          break;
        case Json::parse_event_t::key: {
          const std::string key = parsed.get<std::string>();
          if (!open_objects.empty() && !open_objects.back().insert(key).second && !duplicate)
            duplicate = Error(Error::Code::InvalidArgument,
                              At(line_now(), "key '" + key + "' appears twice in one object"));
          if (depth == 1) {
            current_top_key = key;
            where.top_keys[key] = line_now();
          }
          if (depth == 3 && current_top_key == "rules" && !where.rule_keys.empty())
            where.rule_keys.back()[key] = line_now();
          break;
        }
        default:
          break;
      }
      return true;
    };
    try {
      document = Json::parse(TrackingIterator(text_.data(), &furthest),
                             TrackingIterator(text_.data() + text_.size(), &furthest), callback,
                             /*allow_exceptions=*/true, /*ignore_comments=*/true);
    } catch (const Json::parse_error& error) {
      const std::size_t offset = error.byte > 0 ? error.byte - 1 : 0;
      const int line = LineAt(text_, offset);
      std::size_t line_start = text_.rfind('\n', offset == 0 ? 0 : offset - 1);
      line_start = line_start == std::string_view::npos || offset == 0 ? 0 : line_start + 1;
      std::string what = error.what();
      // nlohmann's message: "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
      if (std::size_t colon = what.find(": "); colon != std::string::npos)
        what = what.substr(colon + 2);
      return Fail(Error::Code::InvalidArgument, std::string(source_) + ":" + std::to_string(line) +
                                                    ":" + std::to_string(offset - line_start + 1) +
                                                    ": invalid JSON: " + what);
    } catch (const Json::exception& error) {
      return Fail(Error::Code::InvalidArgument,
                  std::string(source_) + ": invalid JSON: " + error.what());
    }
    if (duplicate) return Fail(*duplicate);
    return Build(document, where);
  }

 private:
  std::string At(int line, std::string_view message) const {
    return std::string(source_) + ":" + std::to_string(line) + ": " + std::string(message);
  }

  std::unexpected<Error> Invalid(int line, std::string_view message) const {
    return Fail(Error::Code::InvalidArgument, At(line, message));
  }

  static Expected<Action> ParseAction(const Json& value) {
    if (value.is_string()) {
      const auto& name = value.get_ref<const std::string&>();
      if (name == "allow") return Action::kAllow;
      if (name == "deny") return Action::kDeny;
      if (name == "ask") return Action::kAsk;
    }
    return Fail(Error::Code::InvalidArgument, "must be \"allow\", \"deny\" or \"ask\"");
  }

  // A string or a non-empty array of non-empty strings.
  static Expected<std::vector<std::string>> ParseStrings(const Json& value,
                                                         bool allow_empty_items) {
    std::vector<std::string> out;
    auto add = [&](const Json& item) -> Status {
      if (!item.is_string())
        return Fail(Error::Code::InvalidArgument, "must be a string or an array of strings");
      if (item.get_ref<const std::string&>().empty() && !allow_empty_items)
        return Fail(Error::Code::InvalidArgument, "must not hold an empty string");
      out.push_back(item.get<std::string>());
      return {};
    };
    if (value.is_array()) {
      if (value.empty()) return Fail(Error::Code::InvalidArgument, "must not be an empty array");
      for (const Json& item : value) SANDBOX_RETURN_IF_ERROR(add(item));
    } else {
      SANDBOX_RETURN_IF_ERROR(add(value));
    }
    return out;
  }

  Expected<Policy> Build(const Json& document, const Locations& where) const {
    auto top_line = [&](const std::string& key) {
      auto found = where.top_keys.find(key);
      return found == where.top_keys.end() ? 1 : found->second;
    };
    if (!document.is_object())
      return Invalid(1, "a policy is a JSON object with \"version\", \"default\" and \"rules\"");
    for (const auto& [key, value] : document.items()) {
      if (key != "version" && key != "default" && key != "default_reason" && key != "rules" &&
          key != "comment")
        return Invalid(top_line(key), "unknown key '" + key +
                                          "' (expected version, default, default_reason, rules, "
                                          "comment)");
    }
    if (!document.contains("version")) return Invalid(1, "missing \"version\": 1");
    if (document["version"] != 1)
      return Invalid(top_line("version"), "unsupported \"version\": this sandbox reads version 1");
    if (!document.contains("default"))
      return Invalid(1,
                     "missing \"default\": \"allow\", \"deny\" or \"ask\" (what happens when no "
                     "rule matches)");
    Policy policy;
    policy.source = std::string(source_);
    auto action = ParseAction(document["default"]);
    if (!action) return Invalid(top_line("default"), "\"default\" " + action.error().message());
    policy.default_action = *action;
    if (document.contains("default_reason")) {
      if (!document["default_reason"].is_string())
        return Invalid(top_line("default_reason"), "\"default_reason\" must be a string");
      policy.default_reason = document["default_reason"].get<std::string>();
    }
    if (!document.contains("rules")) return policy;
    const Json& rules = document["rules"];
    if (!rules.is_array())
      return Invalid(top_line("rules"), "\"rules\" must be an array of objects");
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const int line = i < where.rule_lines.size() ? where.rule_lines[i] : top_line("rules");
      const std::string name = "rule " + std::to_string(i + 1);
      if (!rules[i].is_object()) return Invalid(line, name + " must be an object");
      auto key_line = [&](const std::string& key) {
        if (i >= where.rule_keys.size()) return line;
        auto found = where.rule_keys[i].find(key);
        return found == where.rule_keys[i].end() ? line : found->second;
      };
      Rule rule;
      rule.number = static_cast<int>(i) + 1;
      rule.line = line;
      bool has_action = false;
      for (const auto& [key, value] : rules[i].items()) {
        const int at = key_line(key);
        auto invalid = [&](const Error& error) {
          return Invalid(at, name + ": \"" + key + "\" " + error.message());
        };
        if (key == "action") {
          auto parsed = ParseAction(value);
          if (!parsed) return invalid(parsed.error());
          rule.action = *parsed;
          has_action = true;
        } else if (key == "operations") {
          auto names = ParseStrings(value, false);
          if (!names) return invalid(names.error());
          for (const std::string& op_name : *names) {
            auto op = ParseOperation(op_name);
            if (!op || (*op != Operation::Exec && *op != Operation::WriteFile &&
                        *op != Operation::AppendFile && *op != Operation::Remove &&
                        *op != Operation::MakeDirAll))
              return Invalid(at, name + ": unknown operation '" + op_name +
                                     "' (expected exec, write_file, append_file, remove, "
                                     "make_dir_all)");
            rule.operations.push_back(*op);
          }
        } else if (key == "program" || key == "args" || key == "any_arg" || key == "path") {
          auto patterns = ParseStrings(value, key == "args");
          if (!patterns) return invalid(patterns.error());
          (key == "program"   ? rule.programs
           : key == "args"    ? rule.args
           : key == "any_arg" ? rule.any_arg
                              : rule.paths) = std::move(*patterns);
        } else if (key == "reason") {
          if (!value.is_string()) return Invalid(at, name + ": \"reason\" must be a string");
          rule.reason = value.get<std::string>();
        } else if (key != "comment") {
          return Invalid(at, name + ": unknown key '" + key +
                                 "' (expected action, operations, program, args, any_arg, path, "
                                 "reason, comment)");
        }
      }
      if (!has_action) return Invalid(line, name + ": missing \"action\"");
      if (rule.is_exec_rule() && rule.is_path_rule())
        return Invalid(line, name +
                                 ": a rule matches a program or a path, not both (program, "
                                 "args and any_arg are for exec; path is for file operations)");
      for (Operation op : rule.operations) {
        if (rule.is_exec_rule() && op != Operation::Exec)
          return Invalid(key_line("operations"),
                         name +
                             ": program, args and any_arg only match exec, but the rule "
                             "lists '" +
                             std::string(ToString(op)) + "'");
        if (rule.is_path_rule() && op == Operation::Exec)
          return Invalid(key_line("operations"),
                         name + ": path only matches file operations, but the rule lists 'exec'");
      }
      policy.rules.push_back(std::move(rule));
    }
    return policy;
  }

  std::string_view text_;
  std::string_view source_;
};

std::string Basename(std::string_view path) {
  std::size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool AnyMatch(const std::vector<std::string>& patterns, std::string_view text,
              gated::GlobMode mode) {
  for (const std::string& pattern : patterns)
    if (gated::GlobMatch(pattern, text, mode)) return true;
  return false;
}

bool Matches(const Rule& rule, const ReviewRequest& request) {
  const bool is_exec = request.operation == Operation::Exec;
  if (!rule.operations.empty() && std::find(rule.operations.begin(), rule.operations.end(),
                                            request.operation) == rule.operations.end())
    return false;
  if (rule.is_exec_rule() && !is_exec) return false;
  if (rule.is_path_rule() && is_exec) return false;
  if (is_exec && request.command) {
    const Command& command = *request.command;
    if (!rule.programs.empty()) {
      bool matched = false;
      for (const std::string& pattern : rule.programs) {
        // A pattern without '/' names the program wherever it lives: "rm"
        // matches "/bin/rm" and "../../bin/rm" too.
        std::string_view subject = command.path;
        std::string base;
        if (pattern.find('/') == std::string::npos) subject = base = Basename(command.path);
        if (gated::GlobMatch(pattern, subject, gated::GlobMode::kText)) matched = true;
      }
      if (!matched) return false;
    }
    if (rule.args.size() > command.args.size()) return false;
    for (std::size_t i = 0; i < rule.args.size(); ++i)
      if (!gated::GlobMatch(rule.args[i], command.args[i], gated::GlobMode::kText)) return false;
    if (!rule.any_arg.empty()) {
      bool matched = false;
      for (const std::string& arg : command.args)
        matched = matched || AnyMatch(rule.any_arg, arg, gated::GlobMode::kText);
      if (!matched) return false;
    }
  }
  if (rule.is_path_rule() &&
      !AnyMatch(rule.paths, gated::NormalizePath(request.path, request.workdir),
                gated::GlobMode::kPath))
    return false;
  return true;
}

class RulesReviewer final : public Reviewer {
 public:
  RulesReviewer(Policy policy, std::shared_ptr<Reviewer> ask)
      : policy_(std::move(policy)), ask_(std::move(ask)) {}

  std::string Name() const override { return "rules"; }

  Expected<Decision> Review(const Context& ctx, const ReviewRequest& request) override {
    for (const Rule& rule : policy_.rules) {
      if (!Matches(rule, request)) continue;
      const std::string where = "rule " + std::to_string(rule.number) + " of " + policy_.source +
                                ", line " + std::to_string(rule.line);
      return Act(ctx, request, rule.action, rule.reason, where);
    }
    return Act(ctx, request, policy_.default_action, policy_.default_reason,
               "the default of " + policy_.source);
  }

 private:
  Expected<Decision> Act(const Context& ctx, const ReviewRequest& request, Action action,
                         const std::string& reason, const std::string& where) {
    switch (action) {
      case Action::kAllow:
        return Decision::Allow(reason.empty() ? "allowed by " + where : reason);
      case Action::kDeny:
        return Decision::Deny(reason.empty() ? "denied by " + where : reason + " [" + where + "]");
      case Action::kAsk:
        break;
    }
    if (!ask_)
      return Decision::Deny(where + " says to ask a person, but no one can be asked here" +
                            (reason.empty() ? "" : ": " + reason));
    auto decision = ask_->Review(ctx, request);
    if (decision && decision->decided_by.empty()) decision->decided_by = ask_->Name();
    return decision;
  }

  const Policy policy_;
  const std::shared_ptr<Reviewer> ask_;
};

}  // namespace

Expected<std::shared_ptr<Reviewer>> ParseRulesReviewer(std::string_view policy_text,
                                                       std::string_view source_name,
                                                       std::shared_ptr<Reviewer> ask) {
  if (policy_text.size() > kMaxPolicyBytes)
    return Fail(Error::Code::TooLarge,
                std::string(source_name) + ": a policy file holds at most 1 MiB");
  auto policy = PolicyParser(policy_text, source_name).Parse();
  if (!policy) return Fail(policy.error());
  return std::shared_ptr<Reviewer>(
      std::make_shared<RulesReviewer>(std::move(*policy), std::move(ask)));
}

Expected<std::shared_ptr<Reviewer>> LoadRulesReviewer(const std::string& policy_path,
                                                      std::shared_ptr<Reviewer> ask) {
  int fd = open(policy_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    Error error = os::ErrnoError(errno, "open", policy_path);
    return Fail(error.code(), "cannot read the review policy: " + error.message());
  }
  os::UniqueFd owned(fd);
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode))
    return Fail(Error::Code::NotARegularFile,
                "the review policy '" + policy_path + "' is not a regular file");
  auto text = os::ReadAll(fd, kMaxPolicyBytes + 1);
  if (!text)
    return Fail(text.error().code(),
                "cannot read the review policy '" + policy_path + "': " + text.error().message());
  return ParseRulesReviewer(*text, policy_path, std::move(ask));
}

}  // namespace sandbox

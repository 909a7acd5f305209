// Text helpers of the review gate: glob patterns for policy rules, and the
// escaping that makes a hostile argument safe to show on a terminal.
#ifndef SANDBOX_GATED_TEXT_H_
#define SANDBOX_GATED_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace sandbox::gated {

// How a glob treats '/'.
enum class GlobMode {
  kText,  // '*' matches any run of characters, '/' included
  kPath,  // '*' and '?' never match '/'; '**' matches any run, '/' included
};

// Matches `text` against `pattern` whole: '*' any run, '?' one character,
// '\' makes the next character literal; everything else is literal.
// Runs in O(|pattern| * |text|) time.
bool GlobMatch(std::string_view pattern, std::string_view text, GlobMode mode);

// The path as the fence will see it, lexically: "./a//b/../c" -> "a/c",
// "" and "." -> ".". Leading ".." components are kept (the fence refuses
// them). `workdir` (absolute, may be "") is stripped from an absolute path
// under it.
std::string NormalizePath(std::string_view path, std::string_view workdir);

// `text` for a terminal: bare when it is non-empty and only holds
// [A-Za-z0-9_@%+=:,./-], else in bash's $'...' quoting with \\, \', \n, \t,
// \r, \e and \xNN for every other control byte, DEL, C1 control and invalid
// UTF-8 byte, and \uNNNN for invisible and bidirectional-formatting
// characters. At most `max_bytes` of `text` are shown; a note says how many
// more were not.
std::string QuoteForTerminal(std::string_view text, std::size_t max_bytes);

}  // namespace sandbox::gated

#endif  // SANDBOX_GATED_TEXT_H_

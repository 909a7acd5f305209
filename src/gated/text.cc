#include "gated/text.h"

#include <cstdint>
#include <cstdio>
#include <vector>

namespace sandbox::gated {
namespace {

// A pattern element: a literal byte, '?', '*' or '**'.
struct Token {
  enum Kind { kLiteral, kAnyOne, kStar, kDoubleStar } kind;
  char literal = 0;
};

std::vector<Token> Tokenize(std::string_view pattern, GlobMode mode) {
  std::vector<Token> tokens;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      tokens.push_back({Token::kLiteral, pattern[++i]});
    } else if (c == '?') {
      tokens.push_back({Token::kAnyOne});
    } else if (c == '*') {
      bool double_star = mode == GlobMode::kPath && i + 1 < pattern.size() && pattern[i + 1] == '*';
      while (i + 1 < pattern.size() && pattern[i + 1] == '*') ++i;
      tokens.push_back(
          {double_star || mode == GlobMode::kText ? Token::kDoubleStar : Token::kStar});
    } else {
      tokens.push_back({Token::kLiteral, c});
    }
  }
  return tokens;
}

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view text, GlobMode mode) {
  const std::vector<Token> tokens = Tokenize(pattern, mode);
  // matches[j]: the tokens seen so far match text[0, j).
  std::vector<char> matches(text.size() + 1, 0), next(text.size() + 1, 0);
  matches[0] = 1;
  for (const Token& token : tokens) {
    std::fill(next.begin(), next.end(), 0);
    switch (token.kind) {
      case Token::kLiteral:
      case Token::kAnyOne:
        for (std::size_t j = 0; j < text.size(); ++j) {
          if (!matches[j]) continue;
          char c = text[j];
          bool ok = token.kind == Token::kLiteral ? c == token.literal
                                                  : !(mode == GlobMode::kPath && c == '/');
          if (ok) next[j + 1] = 1;
        }
        break;
      case Token::kStar:
      case Token::kDoubleStar: {
        bool carrying = false;
        for (std::size_t j = 0; j <= text.size(); ++j) {
          if (matches[j]) carrying = true;
          if (carrying) next[j] = 1;
          if (j < text.size() && token.kind == Token::kStar && text[j] == '/') carrying = false;
        }
        break;
      }
    }
    matches.swap(next);
  }
  return matches[text.size()] != 0;
}

std::string NormalizePath(std::string_view path, std::string_view workdir) {
  if (!path.empty() && path.front() == '/' && !workdir.empty()) {
    std::string_view root = workdir;
    while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
    if (path == root) {
      path = ".";
    } else if (path.starts_with(root) && (root == "/" || path[root.size()] == '/')) {
      path.remove_prefix(root == "/" ? 1 : root.size() + 1);
    }
  }
  const bool absolute = !path.empty() && path.front() == '/';
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back(part);
      }
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string normal = absolute ? "/" : "";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) normal += '/';
    normal += parts[i];
  }
  if (normal.empty()) normal = ".";
  return normal;
}

namespace {

bool IsPlain(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
}

// Characters that are invisible or reorder what surrounds them.
bool IsDeceptive(std::uint32_t code_point) {
  return (code_point >= 0x200B && code_point <= 0x200F) ||
         (code_point >= 0x2028 && code_point <= 0x202E) ||
         (code_point >= 0x2060 && code_point <= 0x206F) || code_point == 0xFEFF ||
         code_point == 0x061C || code_point == 0x00AD ||
         (code_point >= 0xFFF9 && code_point <= 0xFFFB);
}

// The length of the valid UTF-8 sequence at the front of `text` and its code
// point, or 0 when it is not one (overlong, surrogate, out of range, cut).
std::size_t DecodeUtf8(std::string_view text, std::uint32_t* code_point) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  std::uint32_t value = 0, minimum = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, value = lead & 0x1F, minimum = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, value = lead & 0x0F, minimum = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, value = lead & 0x07, minimum = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(i) & 0x3F);
  }
  if (value < minimum || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *code_point = value;
  return length;
}

}  // namespace

std::string QuoteForTerminal(std::string_view text, std::size_t max_bytes) {
  const std::size_t hidden = text.size() > max_bytes ? text.size() - max_bytes : 0;
  std::string_view shown = text.substr(0, text.size() - hidden);
  bool plain = !shown.empty();
  for (char c : shown) plain = plain && IsPlain(c);
  std::string out;
  char buffer[16];
  if (plain) {
    out = shown;
  } else {
    out = "$'";
    for (std::size_t i = 0; i < shown.size();) {
      const unsigned char c = static_cast<unsigned char>(shown[i]);
      if (c >= 0x80) {
        std::uint32_t code_point = 0;
        std::size_t length = DecodeUtf8(shown.substr(i), &code_point);
        if (length == 0 || code_point < 0xA0) {  // invalid, or a C1 control
          std::snprintf(buffer, sizeof buffer, "\\x%02X", c);
          out += buffer;
          ++i;
        } else if (IsDeceptive(code_point)) {
          std::snprintf(buffer, sizeof buffer, "\\u%04X", static_cast<unsigned>(code_point));
          out += buffer;
          i += length;
        } else {
          out.append(shown.substr(i, length));
          i += length;
        }
        continue;
      }
      switch (c) {
        case '\\':
          out += "\\\\";
          break;
        case '\'':
          out += "\\'";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\r':
          out += "\\r";
          break;
        case 0x1B:
          out += "\\e";
          break;
        default:
          if (c < 0x20 || c == 0x7F) {
            std::snprintf(buffer, sizeof buffer, "\\x%02X", c);
            out += buffer;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
    }
    out += "'";
  }
  if (hidden > 0) out += " [... " + std::to_string(hidden) + " more bytes not shown]";
  return out;
}

}  // namespace sandbox::gated

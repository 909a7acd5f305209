#include "flags.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>
#include <utility>

namespace sandbox::cli {
namespace {

constexpr std::uint64_t kMaxNanoseconds =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string Quote(std::string_view text) { return "'" + std::string(text) + "'"; }

// A decimal number as written: the integer digits' value and the fraction
// as `fraction / scale` (scale a power of ten).
struct Decimal {
  std::uint64_t integer = 0;
  std::uint64_t fraction = 0;
  std::uint64_t scale = 1;
};

// Consumes "[digits][.digits]" from the front of `text`. Returns nullopt when
// no digit was found or the integer part overflows; `*overflow` says which.
std::optional<Decimal> ConsumeDecimal(std::string_view& text, bool* overflow) {
  *overflow = false;
  Decimal number;
  std::size_t i = 0;
  bool any_digit = false;
  for (; i < text.size() && IsDigit(text[i]); ++i) {
    any_digit = true;
    if (__builtin_mul_overflow(number.integer, std::uint64_t{10}, &number.integer) ||
        __builtin_add_overflow(number.integer, static_cast<std::uint64_t>(text[i] - '0'),
                               &number.integer)) {
      *overflow = true;
      return std::nullopt;
    }
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    for (; i < text.size() && IsDigit(text[i]); ++i) {
      any_digit = true;
      // Digits past 18 cannot change a nanosecond or byte count; ignore them.
      if (number.scale < 1'000'000'000'000'000'000ULL) {
        number.fraction = number.fraction * 10 + static_cast<std::uint64_t>(text[i] - '0');
        number.scale *= 10;
      }
    }
  }
  if (!any_digit) return std::nullopt;
  text.remove_prefix(i);
  return number;
}

// integer * unit + fraction * unit / scale, or nullopt past `max`.
std::optional<std::uint64_t> Scale(const Decimal& number, std::uint64_t unit, std::uint64_t max) {
  std::uint64_t whole = 0;
  if (__builtin_mul_overflow(number.integer, unit, &whole) || whole > max) return std::nullopt;
  // Multiply before dividing; long double holds a 64-bit mantissa, so the
  // product is exact for every fraction this parser keeps.
  long double part = static_cast<long double>(number.fraction) * static_cast<long double>(unit) /
                     static_cast<long double>(number.scale);
  auto fractional = static_cast<std::uint64_t>(part);
  std::uint64_t total = 0;
  if (__builtin_add_overflow(whole, fractional, &total) || total > max) return std::nullopt;
  return total;
}

struct Unit {
  std::string_view name;
  std::uint64_t factor;
};

constexpr Unit kDurationUnits[] = {
    {"ns", 1ULL},
    {"us", 1'000ULL},
    {"\xC2\xB5s", 1'000ULL},  // U+00B5 MICRO SIGN
    {"\xCE\xBCs", 1'000ULL},  // U+03BC GREEK SMALL LETTER MU
    {"ms", 1'000'000ULL},
    {"s", 1'000'000'000ULL},
    {"m", 60'000'000'000ULL},
    {"h", 3'600'000'000'000ULL},
};

constexpr Unit kSizeUnits[] = {
    {"", 1ULL},          {"b", 1ULL},         {"k", 1ULL << 10},   {"kb", 1ULL << 10},
    {"kib", 1ULL << 10}, {"m", 1ULL << 20},   {"mb", 1ULL << 20},  {"mib", 1ULL << 20},
    {"g", 1ULL << 30},   {"gb", 1ULL << 30},  {"gib", 1ULL << 30}, {"t", 1ULL << 40},
    {"tb", 1ULL << 40},  {"tib", 1ULL << 40},
};

std::string Lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return lower;
}

std::unexpected<Error> Invalid(std::string message) {
  return Fail(Error::Code::InvalidArgument, std::move(message));
}

Expected<std::uint64_t> ParsePositiveInteger(std::string_view text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != end)
    return Invalid("invalid number " + Quote(text) + ": expected a positive whole number");
  if (ec == std::errc::result_out_of_range)
    return Invalid("number " + Quote(text) + " is too large");
  if (value == 0) return Invalid("invalid number " + Quote(text) + ": must be at least 1");
  return value;
}

Expected<double> ParsePositiveFloat(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value, std::chars_format::fixed);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value))
    return Invalid("invalid number " + Quote(text) + ": expected a positive number such as 1.5");
  if (value <= 0) return Invalid("invalid number " + Quote(text) + ": must be greater than 0");
  return value;
}

Status ValidateEnv(std::string_view entry) {
  if (entry.find('\0') != std::string_view::npos) return Invalid("--env entry contains a NUL byte");
  std::size_t equals = entry.find('=');
  if (equals == std::string_view::npos)
    return Invalid("--env " + Quote(entry) + " is not KEY=VALUE");
  if (equals == 0) return Invalid("--env " + Quote(entry) + " has an empty KEY");
  return {};
}

enum class Option {
  kBackend,
  kIsolation,
  kWorkspace,
  kTimeout,
  kEnv,
  kDir,
  kRootfs,
  kImage,
  kNetwork,
  kMemory,
  kPids,
  kCpus,
  kJson,
  kReview,
  kReviewTimeout,
  kAudit,
  kHelp,
};

struct OptionSpec {
  std::string_view name;
  Option option;
  bool takes_value;
  std::string_view example;  // shown when the value is missing
};

constexpr OptionSpec kOptions[] = {
    {"--backend", Option::kBackend, true, "--backend local"},
    {"--isolation", Option::kIsolation, true, "--isolation process"},
    {"--workspace", Option::kWorkspace, true, "--workspace ./project"},
    {"--timeout", Option::kTimeout, true, "--timeout 30s"},
    {"--env", Option::kEnv, true, "--env KEY=VALUE"},
    {"--dir", Option::kDir, true, "--dir src"},
    {"--rootfs", Option::kRootfs, true, "--rootfs ./debian-rootfs"},
    {"--image", Option::kImage, true, "--image sandbox-default:latest"},
    {"--network", Option::kNetwork, false, ""},
    {"--memory", Option::kMemory, true, "--memory 512m"},
    {"--pids", Option::kPids, true, "--pids 256"},
    {"--cpus", Option::kCpus, true, "--cpus 1.5"},
    {"--json", Option::kJson, false, ""},
    {"--review", Option::kReview, true, "--review policy.json"},
    {"--review-timeout", Option::kReviewTimeout, true, "--review-timeout 2m"},
    {"--audit", Option::kAudit, true, "--audit audit.jsonl"},
    {"--help", Option::kHelp, false, ""},
    {"-h", Option::kHelp, false, ""},
};

// Prefixes an error's message with the option it came from.
std::unexpected<Error> ForOption(std::string_view name, const Error& error) {
  return Fail(error.code(), std::string(name) + ": " + error.message());
}

Status Apply(const OptionSpec& spec, std::string_view value, RunFlags& flags) {
  switch (spec.option) {
    case Option::kBackend:
      for (std::string_view name : kBackendNames) {
        if (name == value) {
          flags.backend = std::string(value);
          return {};
        }
      }
      return Invalid("unknown backend " + Quote(value) +
                     ": expected local, namespace, docker, gvisor or microvm");
    case Option::kIsolation: {
      auto level = ParseIsolation(value);
      if (!level) return ForOption(spec.name, level.error());
      flags.isolation = *level;
      return {};
    }
    case Option::kWorkspace:
      flags.workspace = std::string(value);
      return {};
    case Option::kTimeout: {
      auto timeout = ParseDuration(value);
      if (!timeout) return ForOption(spec.name, timeout.error());
      flags.timeout = *timeout;
      return {};
    }
    case Option::kEnv:
      SANDBOX_RETURN_IF_ERROR(ValidateEnv(value));
      flags.env.emplace_back(value);
      return {};
    case Option::kDir:
      flags.dir = std::string(value);
      return {};
    case Option::kRootfs:
      flags.rootfs = std::string(value);
      return {};
    case Option::kImage:
      flags.image = std::string(value);
      return {};
    case Option::kNetwork:
      flags.network = true;
      return {};
    case Option::kMemory: {
      auto size = ParseSize(value);
      if (!size) return ForOption(spec.name, size.error());
      flags.memory = *size;
      return {};
    }
    case Option::kPids: {
      auto pids = ParsePositiveInteger(value);
      if (!pids) return ForOption(spec.name, pids.error());
      flags.pids = *pids;
      return {};
    }
    case Option::kCpus: {
      auto cpus = ParsePositiveFloat(value);
      if (!cpus) return ForOption(spec.name, cpus.error());
      flags.cpus = *cpus;
      return {};
    }
    case Option::kJson:
      flags.json = true;
      return {};
    case Option::kReview:
      flags.review = std::string(value);
      return {};
    case Option::kReviewTimeout: {
      auto timeout = ParseDuration(value);
      if (!timeout) return ForOption(spec.name, timeout.error());
      if (timeout->count() == 0) return Invalid("--review-timeout must be more than 0");
      flags.review_timeout = *timeout;
      return {};
    }
    case Option::kAudit:
      flags.audit = std::string(value);
      return {};
    case Option::kHelp:
      flags.help = true;
      return {};
  }
  return Fail(Error::Code::Internal, "unhandled option " + std::string(spec.name));
}

const OptionSpec* FindOption(std::string_view name) {
  for (const OptionSpec& spec : kOptions)
    if (spec.name == name) return &spec;
  return nullptr;
}

// ParseRunFlags, and with `takes_program` false ParseServeFlags.
Expected<RunFlags> ParseFlags(std::span<const std::string> args, bool takes_program);

}  // namespace

Expected<std::chrono::nanoseconds> ParseDuration(std::string_view text) {
  const std::string quoted = Quote(text);
  if (text.empty()) return Invalid("empty duration: use e.g. 500ms, 30s, 5m or 1h");
  if (text.front() == '-')
    return Invalid("negative duration " + quoted + ": a timeout must be positive");
  if (text == "0") return std::chrono::nanoseconds{0};
  std::uint64_t total = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    bool overflow = false;
    std::optional<Decimal> number = ConsumeDecimal(rest, &overflow);
    if (overflow) return Invalid("duration " + quoted + " is too large");
    if (!number)
      return Invalid("invalid duration " + quoted + ": use e.g. 500ms, 30s, 5m, 1h or 1m30s");
    std::size_t unit_length = 0;
    while (unit_length < rest.size() && !IsDigit(rest[unit_length]) && rest[unit_length] != '.')
      ++unit_length;
    std::string_view unit_name = rest.substr(0, unit_length);
    rest.remove_prefix(unit_length);
    if (unit_name.empty())
      return Invalid("missing unit in duration " + quoted + ": use e.g. 500ms, 30s, 5m or 1h");
    const Unit* unit = nullptr;
    for (const Unit& candidate : kDurationUnits)
      if (candidate.name == unit_name) unit = &candidate;
    if (!unit)
      return Invalid("unknown unit " + Quote(unit_name) + " in duration " + quoted +
                     ": use ns, us, ms, s, m or h");
    std::optional<std::uint64_t> value = Scale(*number, unit->factor, kMaxNanoseconds);
    if (!value || __builtin_add_overflow(total, *value, &total) || total > kMaxNanoseconds)
      return Invalid("duration " + quoted + " is too large");
  }
  return std::chrono::nanoseconds{static_cast<std::int64_t>(total)};
}

Expected<std::uint64_t> ParseSize(std::string_view text) {
  const std::string quoted = Quote(text);
  if (text.empty()) return Invalid("empty size: use e.g. 512m, 1g or 1048576");
  if (text.front() == '-') return Invalid("negative size " + quoted + ": a size must be positive");
  std::string_view rest = text;
  bool overflow = false;
  std::optional<Decimal> number = ConsumeDecimal(rest, &overflow);
  if (overflow) return Invalid("size " + quoted + " is too large");
  if (!number) return Invalid("invalid size " + quoted + ": use e.g. 512m, 1g or 1048576");
  const std::string unit_name = Lower(rest);
  const Unit* unit = nullptr;
  for (const Unit& candidate : kSizeUnits)
    if (candidate.name == unit_name) unit = &candidate;
  if (!unit)
    return Invalid("unknown unit " + Quote(rest) + " in size " + quoted +
                   ": use b, k, m, g or t (powers of 1024)");
  if (unit->factor == 1 && number->fraction != 0)
    return Invalid("invalid size " + quoted + ": a number of bytes must be whole");
  std::optional<std::uint64_t> value =
      Scale(*number, unit->factor, std::numeric_limits<std::uint64_t>::max());
  if (!value) return Invalid("size " + quoted + " is too large");
  if (*value == 0) return Invalid("invalid size " + quoted + ": must be at least 1 byte");
  return *value;
}

Expected<RunFlags> ParseRunFlags(std::span<const std::string> args) {
  return ParseFlags(args, /*takes_program=*/true);
}

Expected<RunFlags> ParseServeFlags(std::span<const std::string> args) {
  return ParseFlags(args, /*takes_program=*/false);
}

namespace {

Expected<RunFlags> ParseFlags(std::span<const std::string> args, bool takes_program) {
  RunFlags flags;
  bool have_program = false;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (!takes_program && (arg == "--" || arg.size() < 2 || arg.front() != '-'))
      return Invalid("unexpected argument " + Quote(arg) + ": this command takes options only");
    if (arg == "--") {
      if (i + 1 >= args.size() && !flags.help)
        return Invalid(
            "missing PROGRAM after --: usage: sandbox run [OPTIONS] -- PROGRAM [ARGS...]");
      ++i;
      have_program = i < args.size();
      break;
    }
    if (arg.size() < 2 || arg.front() != '-') {
      have_program = true;
      break;
    }
    std::string_view name = arg;
    std::optional<std::string_view> inline_value;
    if (std::size_t equals = arg.find('=');
        arg.starts_with("--") && equals != std::string_view::npos) {
      name = arg.substr(0, equals);
      inline_value = arg.substr(equals + 1);
    }
    const OptionSpec* spec = FindOption(name);
    if (!spec) return Invalid("unknown option " + Quote(name) + " (see `sandbox run --help`)");
    std::string_view value;
    if (spec->takes_value) {
      if (inline_value) {
        value = *inline_value;
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return Invalid(std::string(spec->name) + " needs a value, e.g. " +
                       std::string(spec->example));
      }
      if (value.empty())
        return Invalid(std::string(spec->name) + " needs a non-empty value, e.g. " +
                       std::string(spec->example));
    } else if (inline_value) {
      return Invalid(std::string(spec->name) + " takes no value");
    }
    SANDBOX_RETURN_IF_ERROR(Apply(*spec, value, flags));
  }
  if (have_program) {
    flags.program = args[i];
    flags.args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  } else if (!flags.help && takes_program) {
    return Invalid("missing PROGRAM: usage: sandbox run [OPTIONS] -- PROGRAM [ARGS...]");
  }
  return flags;
}

}  // namespace

std::string_view RunUsage() {
  return R"(usage: sandbox run [OPTIONS] -- PROGRAM [ARGS...]

Runs PROGRAM inside a sandbox and exits with its exit status.

options:
  --backend local|namespace|docker|gvisor|microvm
  --isolation none|process|kernel|vm   minimum required; picks the fastest backend here that gives it
  --workspace DIR        host folder that becomes the sandbox root (default: current directory)
  --timeout DURATION     e.g. 500ms, 30s, 5m (default: none)
  --env KEY=VALUE        repeatable; the host environment is NOT inherited
  --dir PATH             working directory, sandbox-relative
  --rootfs DIR           namespace backend: an unpacked root filesystem to use
                         instead of the host's system directories
  --image NAME           docker and gvisor backends: the image to run (default
                         sandbox-default:latest, made by `sandbox image build`)
  --network              allow network (default off where the backend can take it away)
  --memory SIZE --pids N --cpus N      resource limits where the backend supports them
  --json                 print one JSON object instead of passing the streams through
  --review POLICY.json|ask
                         send the command to a reviewer first: the rules of a policy
                         file (docs/review-policy.md; its "ask" rules ask on the
                         terminal) or, with "ask", a person on the terminal
  --review-timeout DURATION
                         a review not answered by then denies (default 5m)
  --audit FILE           append one JSON line per decision and per operation to FILE
                         (docs/audit-log.md; rotated at 64 MiB, 3 old files kept)
  -h, --help             print this help and exit

With neither --backend nor --isolation, the namespace backend runs the
command; where it cannot, sandbox run fails and says why (ask for
--backend local, no isolation, for trusted code). --isolation picks the
fastest backend here that gives at least that level, never a weaker one.

The standard input of sandbox run is the command's standard input (read to
its end first when it is not a terminal; at most 256 MiB).

--json prints exactly one object on stdout:
  {"exit_code":0,"stdout":"...","stderr":"...","duration_ms":1.2,"timed_out":false,
   "stdout_truncated":false,"stderr_truncated":false,"signal":null,
   "isolation":"none","backend":"local","stdout_dropped":0,"stderr_dropped":0}
Bytes of stdout/stderr that are not valid UTF-8 are replaced with U+FFFD there.

exit status:
  the command's own; 124 when the sandbox's timeout killed it; 125 when the
  sandbox itself failed (bad usage, a malformed policy, an --isolation this
  machine cannot give, a command the reviewer denied included); 126 cannot execute; 127 not
  found; 128+N when the command was killed by signal N; 130 or 143 when
  sandbox run itself got SIGINT or SIGTERM (the command's tree is killed).
)";
}

}  // namespace sandbox::cli

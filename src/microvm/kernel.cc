#include "microvm/kernel.h"

#include <lzma.h>

#include <functional>
#include <set>

namespace sandbox::vm {
namespace {

constexpr std::string_view kXzMagic("\xfd" "7zXZ\0", 6);
constexpr std::string_view kElfMagic("\x7f" "ELF", 4);

// Decompresses the single xz stream at the start of `input` (trailing bytes
// are ignored), stopping with TooLarge past `max_bytes`.
Expected<std::string> DecompressXzStream(std::string_view input, std::size_t max_bytes) {
  lzma_stream stream = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&stream, UINT64_MAX, 0) != LZMA_OK)
    return Fail(Error::Code::Internal, "lzma_stream_decoder failed");
  std::string out;
  stream.next_in = reinterpret_cast<const std::uint8_t*>(input.data());
  stream.avail_in = input.size();
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK) {
    if (out.size() >= max_bytes) {
      lzma_end(&stream);
      return Fail(Error::Code::TooLarge,
                  "the kernel decompresses to more than " + std::to_string(max_bytes) + " bytes");
    }
    std::size_t old = out.size();
    out.resize(std::min(max_bytes, old + (std::size_t{8} << 20)));
    stream.next_out = reinterpret_cast<std::uint8_t*>(out.data() + old);
    stream.avail_out = out.size() - old;
    ret = lzma_code(&stream, LZMA_FINISH);
    out.resize(out.size() - stream.avail_out);
  }
  lzma_end(&stream);
  if (ret != LZMA_STREAM_END)
    return Fail(Error::Code::InvalidArgument, "corrupt xz stream (lzma error " +
                                                  std::to_string(static_cast<int>(ret)) + ")");
  return out;
}

}  // namespace

Expected<std::string> ExtractVmlinux(std::string_view vmlinuz, std::size_t max_bytes) {
  for (std::size_t at = vmlinuz.find(kXzMagic); at != std::string_view::npos;
       at = vmlinuz.find(kXzMagic, at + 1)) {
    auto out = DecompressXzStream(vmlinuz.substr(at), max_bytes);
    if (!out) {
      if (out.error().code() == Error::Code::TooLarge) return out;
      continue;  // the magic bytes occurred by chance: try the next one
    }
    if (std::string_view(*out).starts_with(kElfMagic)) return out;
  }
  return Fail(Error::Code::InvalidArgument,
              "no xz-compressed ELF kernel inside the vmlinuz (only xz-compressed kernels, as "
              "Debian's, are supported)");
}

std::string StripModuleSignature(std::string module_file) {
  constexpr std::string_view kMarker = "~Module signature appended~\n";
  // struct module_signature: 8 bytes of algorithm ids, then the signature
  // length as a big-endian 32-bit number, right before the marker.
  constexpr std::size_t kInfoSize = 12;
  if (!std::string_view(module_file).ends_with(kMarker) ||
      module_file.size() < kMarker.size() + kInfoSize)
    return module_file;
  std::size_t info = module_file.size() - kMarker.size() - kInfoSize;
  const auto* length_bytes = reinterpret_cast<const unsigned char*>(module_file.data() + info + 8);
  std::size_t signature = (std::size_t{length_bytes[0]} << 24) | (std::size_t{length_bytes[1]} << 16) |
                          (std::size_t{length_bytes[2]} << 8) | length_bytes[3];
  if (signature > info) return module_file;  // not a signature we understand: keep it
  module_file.resize(info - signature);
  return module_file;
}

std::string NormaliseModuleName(std::string_view name) {
  std::string out(name);
  for (char& c : out)
    if (c == '-') c = '_';
  return out;
}

std::vector<std::string> ModuleDepends(std::string_view module_file) {
  // .modinfo holds NUL-separated "key=value" strings.
  constexpr std::string_view kKey("\0depends=", 9);
  std::vector<std::string> out;
  std::size_t at = module_file.find(kKey);
  if (at == std::string_view::npos) return out;
  std::string_view rest = module_file.substr(at + kKey.size());
  rest = rest.substr(0, rest.find('\0'));
  while (!rest.empty()) {
    std::size_t comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    if (!name.empty()) out.push_back(NormaliseModuleName(name));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

Expected<std::vector<std::string>> ModuleLoadOrder(
    const std::vector<std::string>& wanted,
    const std::map<std::string, std::vector<std::string>>& depends) {
  std::vector<std::string> order;
  std::set<std::string> done, visiting;
  std::function<Status(const std::string&)> visit = [&](const std::string& name) -> Status {
    if (done.contains(name)) return {};
    if (!visiting.insert(name).second)
      return Fail(Error::Code::InvalidArgument, "module dependency cycle through " + name);
    auto it = depends.find(name);
    if (it == depends.end())
      return Fail(Error::Code::NotFound, "kernel module " + name + " is not in the kernel package");
    for (const std::string& dependency : it->second) SANDBOX_RETURN_IF_ERROR(visit(dependency));
    visiting.erase(name);
    done.insert(name);
    order.push_back(name);
    return {};
  };
  for (const std::string& name : wanted) SANDBOX_RETURN_IF_ERROR(visit(NormaliseModuleName(name)));
  return order;
}

}  // namespace sandbox::vm

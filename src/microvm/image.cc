// BuildVmImage: a Debian kernel package -> vmlinux + the modules the guest
// needs, and an initramfs whose /init is the static agent.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <map>

#include "microvm/cpio.h"
#include "microvm/guest_layout.h"
#include "microvm/host_tools.h"
#include "microvm/kernel.h"
#include "os/syscalls.h"
#include "sandbox/microvm.h"

namespace sandbox {
namespace {

namespace fs = std::filesystem;

// What the guest loads: the virtio-mmio transport, the agent's serial port,
// 9p shares, and vsock (used only when the VMM offers no serial port).
const std::vector<std::string> kGuestModules = {
    "virtio_mmio", "virtio_console", "9pnet_virtio", "9p", "vmw_vsock_virtio_transport"};

void Progress(const VmImageOptions& options, std::string_view line) {
  if (options.progress) options.progress(line);
}

std::string DefaultCacheDir() {
  if (const char* env = std::getenv("SANDBOX_VM_CACHE"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/sandbox/vm";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/sandbox/vm";
}

std::string DefaultAgentPath() {
  if (const char* env = std::getenv("SANDBOX_AGENT"); env && *env) return env;
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "sandbox-agent";
  return (self.parent_path() / "sandbox-agent").string();
}

// "linux-image-6.1.0-50-amd64_6.1.176-1_amd64.deb" -> "6.1.0-50-amd64".
Expected<std::string> KernelReleaseOf(const std::string& deb) {
  std::string name = fs::path(deb).filename().string();
  constexpr std::string_view kPrefix = "linux-image-";
  std::size_t underscore = name.find('_');
  if (!name.starts_with(kPrefix) || underscore == std::string::npos || !name.ends_with(".deb"))
    return Fail(Error::Code::InvalidArgument,
                "'" + deb + "' is not a Debian kernel package (linux-image-VERSION_..._amd64.deb)");
  return name.substr(kPrefix.size(), underscore - kPrefix.size());
}

// The newest kernel already extracted into `cache`: its release.
std::optional<std::string> ExtractedKernelInCache(const std::string& cache) {
  std::error_code ec;
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(cache, ec)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with("kernel-") && fs::exists(entry.path() / "modules/order", ec) &&
        fs::exists(entry.path() / "vmlinux", ec))
      found.push_back(name.substr(7));
  }
  if (found.empty()) return std::nullopt;
  std::sort(found.begin(), found.end());
  return found.back();
}

std::optional<std::string> DebInCache(const std::string& cache) {
  std::error_code ec;
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(cache, ec)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with("linux-image-") && name.ends_with(".deb") &&
        name.find("-dbg") == std::string::npos)
      found.push_back(entry.path().string());
  }
  if (found.empty()) return std::nullopt;
  std::sort(found.begin(), found.end());
  return found.back();
}

// The kernel package linux-image-amd64 currently depends on, downloaded
// into `cache` with apt-get.
Expected<std::string> DownloadKernelDeb(const std::string& cache, const VmImageOptions& options) {
  auto depends = vm::RunTool({"apt-cache", "depends", "linux-image-amd64"});
  if (!depends) return Fail(depends.error());
  std::string package;
  std::size_t at = depends->find("Depends: linux-image-");
  if (at != std::string::npos) {
    std::size_t start = at + std::string_view("Depends: ").size();
    std::size_t end = depends->find_first_of(" \n", start);
    package = depends->substr(start, end - start);
  }
  if (package.empty())
    return Fail(Error::Code::NotFound,
                "apt-cache does not know linux-image-amd64: run apt-get update, or pass a kernel "
                "package with --kernel-deb");
  Progress(options, "downloading " + package + " with apt-get");
  SANDBOX_RETURN_IF_ERROR(vm::RunTool({"apt-get", "download", "-q", package}, cache));
  if (auto deb = DebInCache(cache)) return *deb;
  return Fail(Error::Code::NotFound, "apt-get download " + package + " left no .deb in " + cache);
}

// Unpacks `deb` into a scratch directory, keeps vmlinux and the modules
// the guest needs in `kernel_dir`, and removes the rest.
Status ExtractKernel(const std::string& deb, const std::string& release,
                     const std::string& kernel_dir, const VmImageOptions& options) {
  // Per-process scratch names: test processes may build the same image at
  // once; the first to rename its result into place wins.
  std::string suffix = "." + std::to_string(::getpid());
  std::string scratch = kernel_dir + ".unpack" + suffix;
  std::error_code ec;
  fs::remove_all(scratch, ec);
  struct RemoveScratch {
    std::string path;
    ~RemoveScratch() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } remove_scratch{scratch};
  Progress(options, "unpacking " + fs::path(deb).filename().string());
  SANDBOX_RETURN_IF_ERROR(vm::RunTool({"dpkg-deb", "-x", deb, scratch}));

  std::string staging = kernel_dir + ".new" + suffix;
  fs::remove_all(staging, ec);
  RemoveScratch remove_staging{staging};  // a no-op once renamed into place
  fs::create_directories(staging + "/modules", ec);
  if (ec) return Fail(Error::Code::PermissionDenied, "mkdir " + staging + ": " + ec.message());

  Progress(options, "extracting vmlinux from vmlinuz-" + release);
  auto vmlinuz = vm::ReadWholeFile(scratch + "/boot/vmlinuz-" + release, std::size_t{256} << 20);
  if (!vmlinuz) return Fail(vmlinuz.error());
  auto vmlinux = vm::ExtractVmlinux(*vmlinuz);
  if (!vmlinux) return Fail(vmlinux.error());
  SANDBOX_RETURN_IF_ERROR(vm::WriteFileAtomically(staging + "/vmlinux", *vmlinux, 0644));

  std::map<std::string, fs::path> files;
  std::map<std::string, std::vector<std::string>> depends;
  for (const auto& entry :
       fs::recursive_directory_iterator(scratch + "/lib/modules/" + release + "/kernel", ec)) {
    if (entry.path().extension() != ".ko") continue;
    std::string name = vm::NormaliseModuleName(entry.path().stem().string());
    files[name] = entry.path();
  }
  if (files.empty())
    return Fail(Error::Code::NotFound, deb + " holds no uncompressed modules for " + release);
  // Dependencies are read only from the modules on the paths we walk.
  std::vector<std::string> pending = kGuestModules;
  while (!pending.empty()) {
    std::string name = vm::NormaliseModuleName(pending.back());
    pending.pop_back();
    if (depends.contains(name) || !files.contains(name)) continue;
    auto data = vm::ReadWholeFile(files[name].string(), std::size_t{64} << 20);
    if (!data) return Fail(data.error());
    depends[name] = vm::ModuleDepends(*data);
    for (const auto& dependency : depends[name]) pending.push_back(dependency);
  }
  auto order = vm::ModuleLoadOrder(kGuestModules, depends);
  if (!order) return Fail(order.error());
  std::string order_file;
  for (const auto& name : *order) {
    fs::copy_file(files[name], staging + "/modules/" + name + ".ko", ec);
    if (ec) return Fail(Error::Code::Internal, "copy " + name + ".ko: " + ec.message());
    order_file += name + "\n";
  }
  SANDBOX_RETURN_IF_ERROR(vm::WriteFileAtomically(staging + "/modules/order", order_file, 0644));
  fs::rename(staging, kernel_dir, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    if (fs::exists(kernel_dir + "/modules/order", ignored)) return {};  // another process won
    return Fail(Error::Code::Internal, "rename " + staging + ": " + ec.message());
  }
  return {};
}

// Every agent build makes an image of its own (and the tests make one with
// a hostile /init), so images are removed once unused: one not built or
// booted for a day goes at the next build in the same kernel directory. A
// VMM reads its initramfs whole when it starts, so no running guest needs
// the file; a pool idle for longer than that would fail its next boot with
// a clear NotFound rather than the cache growing without bound.
constexpr auto kUnusedImageLifetime = std::chrono::hours(24);

void RemoveUnusedImages(const std::string& kernel_dir, const std::string& keep) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(kernel_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    std::string name = path.filename().string();
    if (!name.starts_with("initramfs-") || !name.ends_with(".cpio") || path == keep) continue;
    std::error_code entry_ec;
    auto used = fs::last_write_time(path, entry_ec);
    if (!entry_ec && now - used > kUnusedImageLifetime) fs::remove(path, entry_ec);
  }
}

// The initramfs: /init is the agent, the modules in load order, a minimal
// /etc (nothing of the host's but the dynamic linker's cache), mount points,
// and the host's /usr-merge symlinks.
Expected<std::string> MakeInitramfs(const std::string& kernel_dir, const std::string& agent_path) {
  vm::CpioWriter cpio;
  for (const char* dir : {"dev", "proc", "sys", "tmp", "run", "usr", "workspace", "root", "etc",
                          "sandbox", "sandbox/modules"})
    cpio.AddDirectory(dir, std::string_view(dir) == "tmp" ? 01777 : 0755);
  cpio.AddCharDevice("dev/console", 0600, 5, 1);  // /init's stdio: the serial console
  // The guest's root is this initramfs with the host's /usr shared read-only;
  // the top-level directories merged into /usr on the host are links here too.
  for (const char* name : {"bin", "sbin", "lib", "lib32", "lib64", "libx32"}) {
    std::error_code ec;
    fs::path host = fs::path("/") / name;
    if (fs::is_symlink(host, ec)) cpio.AddSymlink(name, fs::read_symlink(host, ec).string());
  }
  // The agent without its symbols: a quarter of the size, and the guest
  // kernel unpacks every byte of the initramfs before /init runs.
  std::string stripped = kernel_dir + "/init.stripped." + std::to_string(::getpid());
  bool strip_ok = vm::RunTool({"objcopy", "--strip-all", agent_path, stripped}).has_value();
  auto agent = vm::ReadWholeFile(strip_ok ? stripped : agent_path, std::size_t{256} << 20);
  ::unlink(stripped.c_str());
  if (!agent)
    return Fail(Error::Code::Unavailable,
                agent.error().message() +
                    ": the guest image needs the static sandbox-agent binary (build it, or point "
                    "SANDBOX_AGENT at it)");
  cpio.AddFile("init", 0755, *agent);
  auto order = vm::ReadWholeFile(kernel_dir + "/modules/order", 1 << 16);
  if (!order) return Fail(order.error());
  cpio.AddFile(std::string(vm::kModuleOrderFile.substr(1)), 0644, *order);
  std::string_view names = *order;
  while (!names.empty()) {
    std::string name(names.substr(0, names.find('\n')));
    names.remove_prefix(std::min(names.size(), name.size() + 1));
    if (name.empty()) continue;
    auto module = vm::ReadWholeFile(kernel_dir + "/modules/" + name + ".ko", std::size_t{64} << 20);
    if (!module) return Fail(module.error());
    cpio.AddFile(std::string(vm::kModuleDir.substr(1)) + "/" + name + ".ko", 0644,
                 vm::StripModuleSignature(std::move(*module)));
  }
  cpio.AddFile("etc/passwd", 0644,
               "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
  cpio.AddFile("etc/group", 0644, "root:x:0:\nnogroup:x:65534:\n");
  cpio.AddFile("etc/nsswitch.conf", 0644, "passwd: files\ngroup: files\nhosts: files\n");
  cpio.AddFile("etc/hosts", 0644, "127.0.0.1 localhost\n");
  cpio.AddFile("etc/hostname", 0644, "sandbox\n");
  // Without the cache the dynamic linker would not search the multiarch
  // library directories (/usr/lib/x86_64-linux-gnu) of the shared /usr.
  if (auto cache = vm::ReadWholeFile("/etc/ld.so.cache", std::size_t{64} << 20))
    cpio.AddFile("etc/ld.so.cache", 0644, *cache);
  return cpio.Finish();
}

}  // namespace

Expected<VmImage> BuildVmImage(const VmImageOptions& options) {
  std::string cache = options.cache_dir.empty() ? DefaultCacheDir() : options.cache_dir;
  std::error_code ec;
  fs::create_directories(cache, ec);
  if (ec) return Fail(Error::Code::PermissionDenied, "mkdir " + cache + ": " + ec.message());

  std::string deb = options.kernel_deb;
  if (deb.empty())
    if (const char* env = std::getenv("SANDBOX_VM_KERNEL_DEB"); env && *env) deb = env;
  std::optional<std::string> extracted;
  if (deb.empty()) extracted = ExtractedKernelInCache(cache);
  if (deb.empty() && !extracted) {
    if (auto cached = DebInCache(cache)) {
      deb = *cached;
    } else {
      auto downloaded = DownloadKernelDeb(cache, options);
      if (!downloaded) return Fail(downloaded.error());
      deb = *downloaded;
    }
  }
  auto release = extracted ? Expected<std::string>(*extracted) : KernelReleaseOf(deb);
  if (!release) return Fail(release.error());
  std::string kernel_dir = cache + "/kernel-" + *release;
  if (!fs::exists(kernel_dir + "/modules/order", ec)) {
    if (!fs::exists(deb, ec)) return Fail(Error::Code::NotFound, "kernel package " + deb + " does not exist");
    SANDBOX_RETURN_IF_ERROR(ExtractKernel(deb, *release, kernel_dir, options));
  } else {
    Progress(options, "kernel " + *release + " already extracted in " + kernel_dir);
  }

  std::string agent_path = options.agent_path.empty() ? DefaultAgentPath() : options.agent_path;
  Progress(options, "writing the initramfs (/init = " + agent_path + ")");
  auto initramfs = MakeInitramfs(kernel_dir, agent_path);
  if (!initramfs) return Fail(initramfs.error());
  // Named by its contents: builds with different agents (another build
  // directory, a test's hostile /init) never overwrite each other's image
  // while a VMM may be reading it.
  char name[64];
  std::snprintf(name, sizeof name, "/initramfs-%016zx.cpio", std::hash<std::string>{}(*initramfs));
  std::string initramfs_path = kernel_dir + name;
  auto existing = vm::ReadWholeFile(initramfs_path, initramfs->size() + 1);
  if (!existing || *existing != *initramfs)
    SANDBOX_RETURN_IF_ERROR(vm::WriteFileAtomically(initramfs_path, *initramfs, 0644));
  else
    vm::MarkImageUsed(initramfs_path);
  RemoveUnusedImages(kernel_dir, initramfs_path);
  Progress(options, "image ready: " + kernel_dir);
  return VmImage{.kernel = kernel_dir + "/vmlinux",
                 .initramfs = initramfs_path,
                 .kernel_release = *release};
}

}  // namespace sandbox

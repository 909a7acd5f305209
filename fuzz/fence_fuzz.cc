// libFuzzer target for the path fence: arbitrary bytes become sandbox paths
// handed to every local::FileSystem operation. A fixed tree is built once,
// with symlinks that point outside the root (relative, absolute, dangling,
// /proc magic links), a FIFO, and a secret and a canary outside the root.
// The process aborts if the secret is ever read or listed, if anything
// outside the root changes, or if a directory fd opened beneath the root
// names a directory outside it.
//
//   ./fence_fuzz -max_total_time=30 -dict=fuzz/fence_fuzz.dict
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "local/files.h"

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSecret = "FENCE-FUZZ-SECRET-7f3a9c";
constexpr std::string_view kCanary = "FENCE-FUZZ-CANARY-0b1d2e";
constexpr std::string_view kOutsideOnlyName = "outside_only_entry";
constexpr std::string_view kWorkdir = "/workspace";

[[noreturn]] void Die(const std::string& why) {
  fprintf(stderr, "fence_fuzz: FENCE BREACH: %s\n", why.c_str());
  abort();
}

void WriteFileOrDie(const std::string& path, std::string_view data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size()))
    Die("cannot set up " + path);
  close(fd);
}

std::string ReadHost(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "<missing>";
  char buffer[256];
  long n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<std::size_t>(n));
  close(fd);
  return out;
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    names.insert(entry.path().filename().string());
  return names;
}

struct Fixture {
  std::string base;     // holds root/ and outside/
  std::string root;     // the sandbox root
  std::string outside;  // must never change
  std::string scratch;  // where writes are aimed
  int outside_fd = -1;  // kept open for the /proc/self/fd magic link
  struct stat outside_dir_stat {};
  sandbox::local::FileSystem* files = nullptr;

  Fixture() {
    char pattern[] = "/tmp/sandbox-fence-fuzz-XXXXXX";
    if (!mkdtemp(pattern)) Die("mkdtemp");
    base = fs::canonical(pattern).string();
    root = base + "/root";
    outside = base + "/outside";
    scratch = root + "/scratch";
    mkdir(root.c_str(), 0755);
    mkdir(outside.c_str(), 0755);
    WriteFileOrDie(outside + "/secret", kSecret);
    WriteFileOrDie(outside + "/canary", kCanary);
    WriteFileOrDie(outside + "/" + std::string(kOutsideOnlyName), kSecret);
    mkdir((outside + "/dir").c_str(), 0755);
    outside_fd = open(outside.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (outside_fd < 0) Die("open outside");
    if (stat(outside.c_str(), &outside_dir_stat) != 0) Die("stat outside");
    Repair();
    auto opened = sandbox::local::FileSystem::Open(root, std::string(kWorkdir), 1 << 16);
    if (!opened) Die("FileSystem::Open: " + opened.error().ToString());
    files = new sandbox::local::FileSystem(std::move(*opened));
  }

  // Puts the fixed tree back after a mutating operation changed it, and
  // empties the scratch directory now and then.
  void Repair() {
    auto ensure_dir = [](const std::string& path) {
      struct stat st;
      if (lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
      std::error_code ec;
      fs::remove_all(path, ec);
      mkdir(path.c_str(), 0755);
    };
    auto ensure_file = [](const std::string& path, std::string_view data) {
      struct stat st;
      if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          st.st_size == static_cast<off_t>(data.size()))
        return;
      std::error_code ec;
      fs::remove_all(path, ec);
      WriteFileOrDie(path, data);
    };
    auto ensure_link = [](const std::string& path, const std::string& target) {
      char buffer[4096];
      long n = readlink(path.c_str(), buffer, sizeof buffer);
      if (n >= 0 && std::string_view(buffer, static_cast<std::size_t>(n)) == target) return;
      std::error_code ec;
      fs::remove_all(path, ec);
      if (symlink(target.c_str(), path.c_str()) != 0) Die("symlink " + path);
    };
    ensure_dir(root + "/a");
    ensure_dir(root + "/a/b");
    ensure_file(root + "/a/b/file", "inside file");
    ensure_dir(root + "/a/empty");
    ensure_file(root + "/file", "top file");
    ensure_dir(scratch);
    ensure_link(root + "/link_out", "../outside");
    ensure_link(root + "/a/deep_out", "../../outside/secret");
    ensure_link(root + "/abs_out", outside);
    ensure_link(root + "/secret_link", outside + "/secret");
    ensure_link(root + "/dangling", outside + "/created_through_link");
    ensure_link(root + "/scratch/dangling", outside + "/dir/created");
    ensure_link(root + "/proc_root", "/proc/self/root");
    ensure_link(root + "/fd_out", "/proc/self/fd/" + std::to_string(outside_fd));
    ensure_link(root + "/inside_link", "a/b");
    struct stat st;
    if (lstat((root + "/fifo").c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) {
      std::error_code ec;
      fs::remove_all(root + "/fifo", ec);
      if (mkfifo((root + "/fifo").c_str(), 0644) != 0) Die("mkfifo");
    }
    if (Entries(scratch).size() > 64 || Entries(root).size() > 32) {
      const std::set<std::string> keep = {"a",       "file",        "scratch",  "link_out",
                                          "abs_out", "secret_link", "dangling", "proc_root",
                                          "fd_out",  "inside_link", "fifo"};
      for (const auto& name : Entries(root)) {
        if (keep.count(name)) continue;
        std::error_code ec;
        fs::remove_all(root + "/" + name, ec);
      }
      for (const auto& name : Entries(scratch)) {
        if (name == "dangling") continue;
        std::error_code ec;
        fs::remove_all(scratch + "/" + name, ec);
      }
    }
  }

  // Aborts unless everything outside the root is exactly as it was built.
  void CheckOutsideUntouched(const char* op, std::string_view path) const {
    auto breach = [&](const std::string& what) {
      Die(std::string(op) + " '" + std::string(path) + "': " + what);
    };
    if (Entries(base) != std::set<std::string>{"outside", "root"})
      breach("an entry appeared beside the root");
    if (Entries(outside) != std::set<std::string>{"canary", "dir", "outside_only_entry", "secret"})
      breach("the outside directory's entries changed");
    if (!Entries(outside + "/dir").empty()) breach("something was created in outside/dir");
    if (ReadHost(outside + "/secret") != kSecret) breach("the outside secret changed");
    if (ReadHost(outside + "/canary") != kCanary) breach("the outside canary changed");
    struct stat st;
    if (stat(outside.c_str(), &st) != 0 || st.st_mode != outside_dir_stat.st_mode)
      breach("the outside directory's mode changed");
  }
};

Fixture& GetFixture() {
  static Fixture* fixture = [] {
    auto* made = new Fixture();
    // Leave no temporary tree behind when the run ends (remove_all never
    // follows the fixture's symlinks).
    atexit([] {
      std::error_code ec;
      fs::remove_all(GetFixture().base, ec);
    });
    return made;
  }();
  return *fixture;
}

void CheckNoSecret(std::string_view data, const char* op, std::string_view path) {
  if (data.find(kSecret) != std::string_view::npos || data.find(kCanary) != std::string_view::npos)
    Die(std::string(op) + " '" + std::string(path) + "' returned bytes from outside the root");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* input, std::size_t size) {
  if (size < 2) return 0;
  Fixture& fixture = GetFixture();
  const sandbox::local::FileSystem& files = *fixture.files;
  const std::uint8_t op = input[0] % 8;
  const std::int64_t max = static_cast<std::int64_t>(input[1]) - 8;
  const std::string path(reinterpret_cast<const char*>(input + 2), size - 2);
  const std::string scratch_path = "scratch/" + path;

  switch (op) {
    case 0: {
      auto read = files.ReadFile(path);
      if (read) CheckNoSecret(*read, "ReadFile", path);
      break;
    }
    case 1: {
      auto read = files.ReadFileLimit(path, max);
      if (read) CheckNoSecret(read->data, "ReadFileLimit", path);
      if (read && max > 0 && read->data.size() > static_cast<std::size_t>(max))
        Die("ReadFileLimit returned more than max");
      break;
    }
    case 2: {
      auto list = files.ListDir(path);
      if (list)
        for (const auto& entry : *list)
          if (entry.name == kOutsideOnlyName) Die("ListDir '" + path + "' listed outside the root");
      break;
    }
    case 3: {
      auto dir = files.OpenDirectory(path);
      if (dir) {
        char link[4096];
        std::string proc = "/proc/self/fd/" + std::to_string(dir->get());
        long n = readlink(proc.c_str(), link, sizeof link);
        if (n < 0) Die("readlink " + proc);
        std::string target(link, static_cast<std::size_t>(n));
        if (target != fixture.root && target.rfind(fixture.root + "/", 0) != 0)
          Die("OpenDirectory '" + path + "' opened " + target);
      }
      break;
    }
    case 4:
      (void)files.WriteFile(scratch_path, "fuzz", static_cast<sandbox::FileMode>(max & 0777));
      break;
    case 5:
      (void)files.AppendFile(scratch_path, "fuzz", 0644);
      break;
    case 6:
      (void)files.MakeDirAll(scratch_path, 0755);
      break;
    case 7:
      (void)files.Remove(scratch_path);
      break;
  }
  fixture.CheckOutsideUntouched("op", path);
  if (op >= 4) fixture.Repair();
  return 0;
}

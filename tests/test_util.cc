#include "test_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace sandbox::testing {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/sandbox-test-XXXXXX";
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = std::filesystem::canonical(pattern).string();
}

TempDir::~TempDir() {
  std::error_code ec;
  // Make everything writable first so a test's chmod does not leak the dir.
  for (auto it = std::filesystem::recursive_directory_iterator(
           path_, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec))
      chmod(it->path().c_str(), 0700);
  }
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Join(std::string_view name) const {
  return path_ + "/" + std::string(name);
}

void WriteHostFile(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string ReadHostFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool HostPathExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

int CountProcessesWithArg(std::string_view marker) {
  int count = 0;
  DIR* proc = opendir("/proc");
  if (!proc) return -1;
  while (dirent* entry = readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::string base = std::string("/proc/") + entry->d_name;
    std::string stat = ReadHostFile(base + "/stat");
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) continue;
    if (stat[close_paren + 2] == 'Z') continue;
    std::string cmdline = ReadHostFile(base + "/cmdline");
    std::size_t start = 0;
    while (start < cmdline.size()) {
      std::size_t end = cmdline.find('\0', start);
      if (end == std::string::npos) end = cmdline.size();
      if (std::string_view(cmdline).substr(start, end - start) == marker) {
        ++count;
        break;
      }
      start = end + 1;
    }
  }
  closedir(proc);
  return count;
}

int WaitForNoProcessesWithArg(std::string_view marker, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int count = CountProcessesWithArg(marker);
  while (count > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    count = CountProcessesWithArg(marker);
  }
  return count;
}

std::string UniqueMarker() {
  static std::atomic<int> counter{0};
  // A number of seconds large enough that a sleep never ends during a test
  // and unique per process and call.
  return std::to_string(900000 + (getpid() % 50000) * 10 + (counter++ % 10)) +
         std::to_string(counter.load());
}

static std::size_t StatusField(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::string(field).size())) * 1024;
  }
  return 0;
}

std::size_t PeakRssBytes() { return StatusField("VmHWM:"); }
std::size_t CurrentRssBytes() { return StatusField("VmRSS:"); }

}  // namespace sandbox::testing

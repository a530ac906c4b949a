//===- DiskCache.cpp - the persistent compile cache -----------------------===//

#include "DiskCache.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <utime.h>

namespace lazymlir {

namespace {

constexpr char kMagic[8] = {'L', 'Z', 'M', 'L', 'I', 'R', 'C', '1'};
constexpr size_t kHeader = sizeof(kMagic) + 8 + 32;
constexpr const char *kSuffix = ".lmc";

std::array<uint8_t, 32> digest(const std::string &data) {
  return llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(data.data()), data.size()));
}

} // namespace

std::string sha256Hex(const std::string &data) {
  std::string hex;
  llvm::raw_string_ostream os(hex);
  for (uint8_t byte : digest(data))
    os << llvm::format_hex_no_prefix(byte, 2);
  return hex;
}

DiskCache &DiskCache::get() {
  static DiskCache *cache = new DiskCache(); // used by compiles at exit
  return *cache;
}

void DiskCache::configure(const std::string &directory, uint64_t limit) {
  std::lock_guard<std::mutex> lock(mutex);
  if (directory != dir)
    approxBytes = -1;
  dir = directory;
  maxBytes = limit;
}

bool DiskCache::enabled() const {
  std::lock_guard<std::mutex> lock(mutex);
  return !dir.empty();
}

std::string DiskCache::directory() const {
  std::lock_guard<std::mutex> lock(mutex);
  return dir;
}

std::optional<std::string> DiskCache::read(const std::string &key) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (dir.empty())
      return std::nullopt;
    path = dir + "/" + key + kSuffix;
  }
  // Read, not mapped (IsVolatile): a file changed in place by someone else
  // must give a checksum mismatch, not a SIGBUS.
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false,
                                            /*IsVolatile=*/true);
  if (!buffer) {
    std::lock_guard<std::mutex> lock(mutex);
    ++counts.misses;
    return std::nullopt;
  }
  llvm::StringRef data = (*buffer)->getBuffer();
  bool valid = data.size() >= kHeader &&
               std::memcmp(data.data(), kMagic, sizeof(kMagic)) == 0;
  std::string payload;
  if (valid) {
    uint64_t size;
    std::memcpy(&size, data.data() + sizeof(kMagic), 8);
    valid = size == data.size() - kHeader;
    if (valid) {
      payload.assign(data.data() + kHeader, size);
      valid = std::memcmp(digest(payload).data(),
                          data.data() + sizeof(kMagic) + 8, 32) == 0;
    }
  }
  if (!valid) {
    llvm::sys::fs::remove(path);
    std::lock_guard<std::mutex> lock(mutex);
    ++counts.corrupt;
    ++counts.misses;
    warn("lazymlir: the compile cache entry " + path +
         " is corrupt (truncated or checksum mismatch); it was deleted and "
         "will be compiled again");
    return std::nullopt;
  }
  // Least recently used: a hit refreshes the entry's time.
  ::utime(path.c_str(), nullptr);
  std::lock_guard<std::mutex> lock(mutex);
  ++counts.hits;
  return payload;
}

void DiskCache::write(const std::string &key, const std::string &payload) {
  std::string directory;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (dir.empty())
      return;
    directory = dir;
  }
  auto fail = [&](const std::string &what) {
    std::lock_guard<std::mutex> lock(mutex);
    ++counts.writeErrors;
    if (!warnedWrite)
      warn("lazymlir: cannot write the compile cache in " + directory + " (" +
           what + "); compiled code is not kept on disk");
    warnedWrite = true;
  };
  if (std::error_code ec = llvm::sys::fs::create_directories(directory))
    return fail(ec.message());
  std::string finalPath = directory + "/" + key + kSuffix;
  // Unique per writer: pid and a random number.
  std::random_device random;
  std::string tempPath = finalPath + ".tmp." +
                         std::to_string(llvm::sys::Process::getProcessId()) +
                         "." + std::to_string(random());
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tempPath, ec, llvm::sys::fs::OF_None);
    if (ec)
      return fail(ec.message());
    uint64_t size = payload.size();
    os.write(kMagic, sizeof(kMagic));
    os.write(reinterpret_cast<const char *>(&size), 8);
    auto sum = digest(payload);
    os.write(reinterpret_cast<const char *>(sum.data()), sum.size());
    os << payload;
    os.close();
    if (os.has_error()) {
      os.clear_error();
      llvm::sys::fs::remove(tempPath);
      return fail("write error");
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tempPath, finalPath)) {
    llvm::sys::fs::remove(tempPath);
    return fail(ec.message());
  }
  std::lock_guard<std::mutex> lock(mutex);
  ++counts.writes;
  if (approxBytes >= 0)
    approxBytes += kHeader + payload.size();
  evictIfNeeded();
}

void DiskCache::evictIfNeeded() {
  // Called with the lock held.
  if (approxBytes >= 0 && uint64_t(approxBytes) <= maxBytes)
    return;
  struct Entry {
    std::string path;
    uint64_t size;
    llvm::sys::TimePoint<> time;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  auto now = std::chrono::system_clock::now();
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    llvm::sys::fs::file_status status;
    if (llvm::sys::fs::status(it->path(), status))
      continue;
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (name.contains(".lmc.tmp.")) {
      // A writer that died mid-write; a live one renames within seconds.
      if (now - status.getLastModificationTime() > std::chrono::hours(1))
        llvm::sys::fs::remove(it->path());
      continue;
    }
    if (!name.ends_with(kSuffix))
      continue;
    entries.push_back(
        {it->path(), status.getSize(), status.getLastModificationTime()});
    total += status.getSize();
  }
  if (total > maxBytes) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry &a, const Entry &b) { return a.time < b.time; });
    // Down to 80%, so that the next writes do not scan again at once.
    uint64_t target = maxBytes / 10 * 8;
    for (const Entry &entry : entries) {
      if (total <= target)
        break;
      if (!llvm::sys::fs::remove(entry.path)) {
        total -= entry.size;
        ++counts.evicted;
      }
    }
  }
  approxBytes = int64_t(total);
}

DiskCacheStats DiskCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex);
  return counts;
}

void DiskCache::warn(const std::string &message) {
  warnings.push_back(message);
}

std::vector<std::string> DiskCache::takeWarnings() {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<std::string> taken;
  taken.swap(warnings);
  return taken;
}

} // namespace lazymlir

//===- DiskCache.h - the persistent compile cache ---------------*- C++ -*-===//
//
// Compiled object code (and small records) on disk, shared by every process
// of the user: one file per entry, `<key>.lmc`, holding a magic number, the
// payload's size and SHA-256, then the payload. Writes go to a temporary
// file renamed into place (atomic: concurrent writers of one key are safe,
// a reader sees a whole old or new file). A read checks size and checksum:
// a corrupt or truncated entry is reported once, deleted and counted as a
// miss, and the caller writes it again. Reads refresh the file's time; past
// the size limit, the least recently used entries are deleted.
//
// Internal to the runtime (and the compiler library, which writes graph
// records): no MLIR header, no torch.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_DISKCACHE_H
#define LAZYMLIR_RUNTIME_DISKCACHE_H

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace lazymlir {

struct DiskCacheStats {
  uint64_t hits = 0, misses = 0, writes = 0, corrupt = 0, evicted = 0,
           writeErrors = 0;
};

class DiskCache {
public:
  static DiskCache &get();

  /// `directory` empty: off. Creates the directory on the first write.
  void configure(const std::string &directory, uint64_t maxBytes);
  bool enabled() const;
  std::string directory() const;

  /// The payload stored under `key` (hex digits), verified; nullopt on a
  /// miss (absent, corrupt, unreadable, or the cache is off).
  std::optional<std::string> read(const std::string &key);
  /// Stores `payload` under `key`. Failures (a full disk, no permission) are
  /// reported once as a warning and otherwise ignored: the cache is an
  /// optimization.
  void write(const std::string &key, const std::string &payload);

  DiskCacheStats stats() const;
  /// Warnings since the last call (corrupt entries, write failures).
  std::vector<std::string> takeWarnings();

private:
  void warn(const std::string &message);
  void evictIfNeeded();

  mutable std::mutex mutex;
  std::string dir;
  uint64_t maxBytes = 0;
  /// Bytes of entries, as of the last scan plus writes since (-1: unknown).
  int64_t approxBytes = -1;
  DiskCacheStats counts;
  std::vector<std::string> warnings;
  bool warnedWrite = false;
};

/// SHA-256 of `data` in hex (64 digits).
std::string sha256Hex(const std::string &data);

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_DISKCACHE_H

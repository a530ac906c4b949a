//===- BufferPool.cpp - memory for buffers and temporaries ----------------===//

#include "BufferPool.h"
#include "lazymlir/Runtime/CpuExecutable.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sys/mman.h>
#include <mutex>
#include <map>
#include <unordered_map>
#include <vector>

namespace lazymlir {

namespace {

/// Serves the compiled code's temporaries. Graphs run again and again with
/// the same shapes, so freed blocks are kept by size and handed out again.
/// Idle blocks are kept up to the most the pool has had in use at once
/// (at least `kMaxCachedBytes`): what a step needed, the next step of the
/// same graph needs again, and giving it back only to map it again costs a
/// page fault per 4 KiB (a BERT-base step re-mapped 2.3 GiB: 585K faults,
/// 2.2 s of system time per 4.9 s step). Past that, and on trim(), memory
/// goes back to the system. Thread-safe: graphs may run concurrently.
class BufferPool {
public:
  static BufferPool &get() {
    static BufferPool *pool = new BufferPool(); // never destroyed: JIT code
    return *pool;                               // may run during exit
  }

  void *allocate(size_t alignment, size_t size, bool eager = false) {
    size = roundUp(std::max<size_t>(size, 1));
    {
      std::lock_guard<std::mutex> lock(mutex);
      // The idle block of the least size that holds `size`, if it is at
      // most half as large again: a graph run eagerly (or a new graph)
      // asks for sizes no block has exactly, and a new mapping beside the
      // idle ones grew the pool past twice what it had in use (a BERT-base
      // step run eagerly: 3.0 GiB mapped for at most 2.2 in use).
      auto it = idle.lower_bound(size);
      if (it != idle.end() && it->first <= size + size / 2) {
        size_t held = it->first;
        void *block = it->second.back();
        it->second.pop_back();
        if (it->second.empty())
          idle.erase(it);
        idleBytes -= held;
        noteInUse(held);
        Block &info = blocks.at(block);
        if (info.eager)
          idleEagerBytes -= held;
        info.eager = eager;
        return block;
      }
      // Compiled code asks for a size the pool lacks: the idle blocks of
      // graphs run eagerly go back first. A step that ran eagerly (the first
      // step's graph runs once; a graph waits for its compile aside) leaves
      // blocks of its own sizes, which the compiled steps that follow would
      // keep idle beside their own (BERT-base: a warm process's second step
      // 3.69 GiB, 3.07 once they were given back).
      if (!eager && idleEagerBytes > 0)
        giveBackIdleEager();
      // A graph run eagerly asks for a size the pool lacks: the head of a
      // larger idle block of eager runs, its tail given back; else that
      // many bytes of their idle blocks go back before a new mapping. A
      // step run eagerly needs sizes by phase (activations, then the
      // optimizer's per-parameter ones): without this, blocks of each
      // phase stayed idle through the next and the pool mapped 1.02 GiB
      // idle beside 0.65 GiB of temporaries at once (BERT-base).
      if (eager && idleEagerBytes > 0 && size >= kMappedBytes) {
        if (void *block = splitIdleEager(size, alignment))
          return block;
        giveBackIdleEager(size);
      }
    }
    bool mapped = size >= kMappedBytes && alignment <= kPageBytes;
    void *block;
    if (mapped) {
      block = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (block == MAP_FAILED)
        return nullptr;
    } else {
      block = std::aligned_alloc(std::max(alignment, kAlignment), size);
      if (!block)
        return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex);
    blocks[block] = {size, mapped, eager};
    noteInUse(size);
    return block;
  }

  void release(void *block) {
    if (!block)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    const Block &info = blocks.at(block);
    size_t size = info.size;
    inUseBytes -= size;
    if (idleBytes + size > std::max(kMaxCachedBytes, peakInUseBytes)) {
      giveBack(block);
      return;
    }
    idle[size].push_back(block);
    idleBytes += size;
    if (info.eager)
      idleEagerBytes += size;
  }

  size_t trim() {
    std::lock_guard<std::mutex> lock(mutex);
    size_t freed = idleBytes;
    for (auto &[size, blocks] : idle)
      for (void *block : blocks)
        giveBack(block);
    idle.clear();
    idleBytes = 0;
    idleEagerBytes = 0;
    peakInUseBytes = inUseBytes; // what is kept idle starts over
    return freed;
  }

  BufferPoolStats stats() {
    std::lock_guard<std::mutex> lock(mutex);
    return {inUseBytes, peakInUseBytes, idleBytes};
  }

private:
  struct Block {
    size_t size;
    bool mapped; // pages of its own (munmap), else from malloc (free)
    bool eager;  // last taken by a graph run eagerly
  };

  /// Counts `size` more bytes in use (the mutex is held).
  void noteInUse(size_t size) {
    inUseBytes += size;
    peakInUseBytes = std::max(peakInUseBytes, inUseBytes);
  }

  /// Returns `block`'s memory to the system (the mutex is held).
  void giveBack(void *block) {
    auto it = blocks.find(block);
    if (it->second.mapped)
      munmap(block, it->second.size);
    else
      std::free(block);
    blocks.erase(it);
  }

  /// Gives back idle blocks graphs run eagerly took last, the largest
  /// first, until at least `bytes` went back (all of them by default). The
  /// mutex is held.
  void giveBackIdleEager(size_t bytes = SIZE_MAX) {
    size_t freed = 0;
    for (auto it = idle.end(); it != idle.begin() && freed < bytes;) {
      --it;
      std::vector<void *> &list = it->second;
      size_t kept = 0;
      for (void *block : list) {
        if (freed < bytes && blocks.at(block).eager) {
          idleBytes -= it->first;
          idleEagerBytes -= it->first;
          freed += it->first;
          giveBack(block);
        } else {
          list[kept++] = block;
        }
      }
      list.resize(kept);
      if (list.empty())
        it = idle.erase(it);
    }
  }

  /// The least idle mapped block of eager runs larger than `size`, in use
  /// now with its pages past `size` given back; null if there is none. The
  /// mutex is held.
  void *splitIdleEager(size_t size, size_t alignment) {
    size_t head = (size + kPageBytes - 1) / kPageBytes * kPageBytes;
    if (alignment > kPageBytes)
      return nullptr;
    for (auto it = idle.upper_bound(head); it != idle.end(); ++it) {
      std::vector<void *> &list = it->second;
      for (size_t i = 0; i < list.size(); ++i) {
        void *block = list[i];
        Block &info = blocks.at(block);
        if (!info.eager || !info.mapped)
          continue;
        size_t held = it->first;
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
        if (list.empty())
          idle.erase(it);
        idleBytes -= held;
        idleEagerBytes -= held;
        munmap(static_cast<char *>(block) + head, held - head);
        info.size = head;
        noteInUse(head);
        return block;
      }
    }
    return nullptr;
  }

  static constexpr size_t kAlignment = 64;
  /// Blocks from this size on are mapped pages of their own, which go back
  /// to the system when freed. From malloc they would not: glibc raises its
  /// mmap threshold (up to 32 MiB) each time a mapped block is freed, and
  /// then serves such sizes from its heaps, which keep what was freed. A
  /// BERT-base step's temporaries (6-12 MiB each) left 2.2 GiB there
  /// (NOTES 28).
  static constexpr size_t kMappedBytes = size_t(256) << 10;
  static constexpr size_t kPageBytes = 4096;
  static constexpr size_t kMaxCachedBytes = size_t(1) << 30;
  static size_t roundUp(size_t size) {
    return (size + kAlignment - 1) / kAlignment * kAlignment;
  }

  std::mutex mutex;
  std::unordered_map<void *, Block> blocks;
  std::map<size_t, std::vector<void *>> idle; // by size, least first
  size_t idleBytes = 0, idleEagerBytes = 0;
  size_t inUseBytes = 0, peakInUseBytes = 0;
};

} // namespace

// Temporaries of compiled code (bound in the JIT by KernelJit).
extern "C" void *lazymlirAlignedAlloc(uint64_t alignment, uint64_t size) {
  return BufferPool::get().allocate(alignment, size);
}
extern "C" void *lazymlirAlloc(uint64_t size) {
  return BufferPool::get().allocate(0, size);
}
extern "C" void lazymlirFree(void *block) { BufferPool::get().release(block); }

void *allocateBuffer(size_t bytes) {
  return BufferPool::get().allocate(0, bytes);
}
void *allocateEagerBuffer(size_t bytes) {
  return BufferPool::get().allocate(0, bytes, /*eager=*/true);
}
void releaseBuffer(void *block) { BufferPool::get().release(block); }
size_t trimBufferPool() { return BufferPool::get().trim(); }
size_t idleBufferBytes() { return BufferPool::get().stats().idle; }
BufferPoolStats bufferPoolStats() { return BufferPool::get().stats(); }

} // namespace lazymlir

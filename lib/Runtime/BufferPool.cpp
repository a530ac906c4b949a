//===- BufferPool.cpp - memory for buffers and temporaries ----------------===//

#include "BufferPool.h"
#include "lazymlir/Runtime/CpuExecutable.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sys/mman.h>
#include <mutex>
#include <map>
#include <optional>
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
/// goes back to the system. A size no idle block fits is a fresh mapping
/// whose pages are moved in from idle blocks (fillFromIdle), and an
/// output's buffer gets its pages that way when first written
/// (outputReady): the pool holds about what it has in use, whatever the
/// sizes. Thread-safe: graphs may run concurrently.
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
        noteInUse(it->first);
        void *block = takeIdle(it, it->second.size() - 1);
        blocks.at(block).eager = eager;
        return block;
      }
      // A size the pool lacks: a fresh mapping, with pages moved in from
      // the idle blocks (fillFromIdle), so the pool holds about what it has
      // in use, whatever the sizes (a step run eagerly needs sizes by
      // phase, activations then the optimizer's per-parameter ones, and
      // each phase's blocks stayed idle through the next: BERT-base mapped
      // 1.02 GiB idle beside 0.65 GiB of temporaries at once).
      void *filled = nullptr;
      if (size >= kMappedBytes && alignment <= kPageBytes && idleBytes > 0) {
        filled = mapPages(size);
        if (!filled)
          return nullptr;
        blocks[filled] = {size, true, eager};
        noteInUse(size);
        fillFromIdle(filled, pages(size));
      }
      // Compiled code asks for a size the pool lacks: the idle blocks of
      // graphs run eagerly that are left go back. A step that ran eagerly
      // (the first step's graph runs once; a graph waits for its compile
      // aside) leaves blocks of its own sizes, which the compiled steps that
      // follow would keep idle beside their own (BERT-base: a warm process's
      // second step 3.69 GiB, 3.07 once they were given back).
      if (!eager && idleEagerBytes > 0)
        giveBackIdleEager();
      if (filled)
        return filled;
    }
    return mapFresh(alignment, size, eager);
  }

  /// An output's buffer (destination passing): a large one is a fresh
  /// mapping, not yet paged in, which gets its pages when the graph first
  /// writes it (outputReady). A training step's gradients are outputs,
  /// allocated before the step runs: paged in then, they were held through
  /// the whole forward (0.41 GiB at BERT-base) where eager makes them during
  /// the backward, as the activations they replace die.
  void *allocateOutput(size_t size) {
    size = roundUp(std::max<size_t>(size, 1));
    if (size < kMappedBytes)
      return allocate(0, size);
    void *block = mapPages(size);
    if (!block)
      return nullptr;
    std::lock_guard<std::mutex> lock(mutex);
    Block &info = blocks[block];
    info = {size, true, false};
    info.unbacked = true; // in use from its first write (outputReady)
    return block;
  }

  /// The graph is about to write output `block` (allocateOutput's): its
  /// pages are moved in from idle blocks (mremap: page tables, no copy, no
  /// fault; takeIdleMapped picks them). What idle blocks cannot cover stays
  /// fresh (faulted in when written, as eager's). Anything else: nothing to
  /// do.
  void outputReady(void *block) {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = blocks.find(block);
    if (found == blocks.end() || !found->second.unbacked)
      return;
    found->second.unbacked = false;
    noteInUse(found->second.size);
    size_t need = pages(found->second.size);
    // Pages already there were written (or read) by whoever had the buffer
    // before the graph: moving pages over them would lose them.
    if (!touched(block, need))
      fillFromIdle(block, need);
  }

  /// Moves pages of idle blocks into the first `need` bytes of `block`, a
  /// fresh mapping of the pool's (mremap: page tables, no copy, no fault),
  /// as takeIdleMapped picks them. What they cannot cover stays fresh
  /// (faulted in when written). The mutex is held.
  void fillFromIdle(void *block, size_t need) {
    size_t done = 0;
    std::vector<size_t> seams; // where the pieces meet
    while (done < need && seams.size() < kMaxSeams) {
      bool keepTail;
      void *source = takeIdleMapped(need - done, keepTail);
      if (!source)
        break;
      size_t moved = moveHead(source, static_cast<char *>(block), done,
                              need - done, keepTail, seams);
      if (moved == 0)
        break;
      done += moved;
    }
    if (done > 0 && done < need)
      seams.push_back(done);
    blocks.at(block).seams = std::move(seams);
    recycledBytes += done;
  }

  /// A block of compiled code's own (or, before there is an idle one that
  /// fits, of an eager run's): mapped from the system.
  void *mapFresh(size_t alignment, size_t size, bool eager) {
    bool mapped = size >= kMappedBytes && alignment <= kPageBytes;
    void *block;
    if (mapped) {
      block = mapPages(size);
      if (!block)
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
    Block &info = blocks.at(block);
    size_t size = info.size;
    if (info.unbacked) {
      // An output its graph never announced: kept if something wrote it
      // (torch's own writes), else it has no pages to keep.
      if (!touched(block, pages(size))) {
        giveBack(block);
        return;
      }
      info.unbacked = false;
    } else {
      inUseBytes -= size;
    }
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
    return {inUseBytes, peakInUseBytes, idleBytes, recycledBytes};
  }

private:
  using IdleSet = std::map<size_t, std::vector<void *>>; // by size

  struct Block {
    size_t size;
    bool mapped;           // pages of its own (munmap), else from malloc (free)
    bool eager;            // last taken by a graph run eagerly
    bool unbacked = false; // an output not yet written (allocateOutput)
    /// Offsets where another of the system's mappings begins (pieces moved
    /// in from other blocks): each move stays within one.
    std::vector<size_t> seams;
  };

  /// Whether any page of [block, block + length) is paged in.
  static bool touched(void *block, size_t length) {
    std::vector<unsigned char> resident(length / kPageBytes);
    if (mincore(block, length, resident.data()) != 0)
      return true; // cannot tell: leave it as it is
    return std::any_of(resident.begin(), resident.end(),
                       [](unsigned char page) { return page & 1; });
  }

  static size_t pages(size_t size) {
    return (size + kPageBytes - 1) / kPageBytes * kPageBytes;
  }

  /// An idle mapped block to move pages from, out of the idle set and its
  /// counts, for `size` more bytes: one that holds them and is at most half
  /// as large again (its tail then goes back: `keepTail` false), else the
  /// largest one smaller (all of it moves: blocks are not cut up while
  /// whole ones serve), else the least larger one (its tail stays idle).
  /// Null if there is none. The mutex is held.
  void *takeIdleMapped(size_t size, bool &keepTail) {
    auto mappedIn = [&](IdleSet::iterator it) -> std::optional<size_t> {
      for (size_t i = 0; i < it->second.size(); ++i)
        if (blocks.at(it->second[i]).mapped)
          return i;
      return std::nullopt;
    };
    auto least = idle.lower_bound(size);
    keepTail = false;
    for (auto it = least; it != idle.end() && it->first <= size + size / 2;
         ++it)
      if (auto i = mappedIn(it))
        return takeIdle(it, *i);
    for (auto it = least; it != idle.begin();) {
      --it;
      if (it->first < kMappedBytes)
        break;
      if (auto i = mappedIn(it))
        return takeIdle(it, *i);
    }
    keepTail = true;
    for (auto it = least; it != idle.end(); ++it)
      if (auto i = mappedIn(it))
        return takeIdle(it, *i);
    return nullptr;
  }

  /// Moves the first pages of idle `source` (taken out of the idle set),
  /// up to `size` bytes, to `dest + offset`; what is left of it is idle
  /// again when `keepTail` and not small, else given back. Returns the bytes
  /// moved. mremap moves a range of one of the system's mappings only, and
  /// pieces of different blocks stay apart: where this piece begins (past
  /// `dest`'s start) and the source's seams inside it go to `seams`, as
  /// offsets in `dest`. The mutex is held.
  size_t moveHead(void *source, char *dest, size_t offset, size_t size,
                  bool keepTail, std::vector<size_t> &seams) {
    Block info = blocks.at(source);
    size_t length = pages(info.size), moved = std::min(size, length);
    size_t at = 0;
    std::vector<size_t> bounds;
    for (size_t seam : info.seams)
      if (seam < moved)
        bounds.push_back(seam);
    bounds.push_back(moved);
    for (size_t end : bounds) {
      void *to = mremap(static_cast<char *>(source) + at, end - at, end - at,
                        MREMAP_MAYMOVE | MREMAP_FIXED, dest + offset + at);
      if (to == MAP_FAILED)
        break;
      if (offset + at > 0)
        seams.push_back(offset + at);
      at = end;
    }
    blocks.erase(source);
    // The rest of the source: its own block again (or back to the system).
    char *rest = static_cast<char *>(source) + at;
    if (at < length) {
      if (!keepTail || length - at < kMappedBytes) {
        munmap(rest, length - at);
      } else {
        Block &tail = blocks[rest];
        tail = {length - at, true, info.eager};
        for (size_t seam : info.seams)
          if (seam > at)
            tail.seams.push_back(seam - at);
        idle[tail.size].push_back(rest);
        idleBytes += tail.size;
        if (tail.eager)
          idleEagerBytes += tail.size;
      }
    }
    return at;
  }

  /// Takes the i-th idle block of size `it->first` out of the idle set and
  /// its counts (the mutex is held).
  void *takeIdle(IdleSet::iterator it, size_t i) {
    std::vector<void *> &list = it->second;
    void *block = list[i];
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    idleBytes -= it->first;
    if (blocks.at(block).eager)
      idleEagerBytes -= it->first;
    if (list.empty())
      idle.erase(it);
    return block;
  }

  /// A fresh mapping of `size` bytes' pages, not yet paged in; null if the
  /// system has none.
  static void *mapPages(size_t size) {
    void *block = mmap(nullptr, pages(size), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return block == MAP_FAILED ? nullptr : block;
  }

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

  /// Gives back the idle blocks graphs run eagerly took last. The mutex is
  /// held.
  void giveBackIdleEager() {
    for (auto it = idle.begin(); it != idle.end();) {
      std::vector<void *> &list = it->second;
      size_t kept = 0;
      for (void *block : list) {
        if (blocks.at(block).eager) {
          idleBytes -= it->first;
          idleEagerBytes -= it->first;
          giveBack(block);
        } else {
          list[kept++] = block;
        }
      }
      list.resize(kept);
      it = list.empty() ? idle.erase(it) : std::next(it);
    }
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
  /// Pieces an output's pages may come in (each one of the system's
  /// mappings: vm.max_map_count bounds them, 65530 by default).
  static constexpr size_t kMaxSeams = 16;
  static size_t roundUp(size_t size) {
    return (size + kAlignment - 1) / kAlignment * kAlignment;
  }

  std::mutex mutex;
  std::unordered_map<void *, Block> blocks;
  IdleSet idle; // by size, least first
  size_t idleBytes = 0, idleEagerBytes = 0;
  size_t inUseBytes = 0, peakInUseBytes = 0;
  size_t recycledBytes = 0; // pages moved in from idle blocks
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
void *allocateOutputBuffer(size_t bytes) {
  return BufferPool::get().allocateOutput(bytes);
}
void outputBufferReady(void *block) { BufferPool::get().outputReady(block); }
extern "C" void lazymlirOutputReady(void *block) {
  BufferPool::get().outputReady(block);
}
void *allocateEagerBuffer(size_t bytes) {
  return BufferPool::get().allocate(0, bytes, /*eager=*/true);
}
void releaseBuffer(void *block) { BufferPool::get().release(block); }
size_t trimBufferPool() { return BufferPool::get().trim(); }
size_t idleBufferBytes() { return BufferPool::get().stats().idle; }
BufferPoolStats bufferPoolStats() { return BufferPool::get().stats(); }

} // namespace lazymlir

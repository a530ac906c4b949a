//===- OpenMP.cpp - __kmpc_* entry points over the GNU OpenMP runtime -----===//
//
// What compiled parallel loops call (see OpenMP.h). The OpenMP translation
// outlines each omp.parallel region into a "microtask" taking its captured
// values as one aggregate pointer, forks it with __kmpc_fork_call, and splits
// each omp.wsloop's normalized iteration space (0 .. trip count - 1, step 1)
// between the team with __kmpc_for_static_init_*, followed by a barrier.
//
// The team is a libgomp team (GOMP_parallel). In a process that imported
// torch, that is torch's own libgomp, already loaded with global symbols;
// otherwise the system's libgomp.so.1 is loaded. Without either, parallel
// loops run on the calling thread (a team of one), which is always correct.
//
//===----------------------------------------------------------------------===//

#include "OpenMP.h"
#include "lazymlir/Runtime/CpuExecutable.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <type_traits>
#include <utility>

namespace lazymlir {
namespace {

using ull = unsigned long long;

struct Gomp {
  void (*parallel)(void (*)(void *), void *, unsigned, unsigned) = nullptr;
  void (*barrier)() = nullptr;
  // Guided worksharing loops over [start, end): (up, start, end, increment,
  // smallest chunk, *chunk start, *chunk end), then (*chunk start, *chunk end).
  bool (*guidedStart)(bool, ull, ull, ull, ull, ull *, ull *) = nullptr;
  bool (*guidedNext)(ull *, ull *) = nullptr;
  void (*loopEndNowait)() = nullptr;
  int (*threadNum)() = nullptr;
  int (*numThreads)() = nullptr;
};

const Gomp &gomp() {
  static const Gomp resolved = [] {
    Gomp g;
    // First the libgomp already loaded with global symbols (RTLD_DEFAULT,
    // a null handle), else the system's.
    void *library = RTLD_DEFAULT;
    bool found = dlsym(library, "GOMP_parallel") != nullptr;
    if (!found)
      found = (library = dlopen("libgomp.so.1", RTLD_NOW | RTLD_LOCAL));
    if (found) {
      g.parallel = reinterpret_cast<decltype(g.parallel)>(
          dlsym(library, "GOMP_parallel"));
      g.barrier =
          reinterpret_cast<decltype(g.barrier)>(dlsym(library, "GOMP_barrier"));
      g.threadNum = reinterpret_cast<decltype(g.threadNum)>(
          dlsym(library, "omp_get_thread_num"));
      g.numThreads = reinterpret_cast<decltype(g.numThreads)>(
          dlsym(library, "omp_get_num_threads"));
      g.guidedStart = reinterpret_cast<decltype(g.guidedStart)>(
          dlsym(library, "GOMP_loop_ull_guided_start"));
      g.guidedNext = reinterpret_cast<decltype(g.guidedNext)>(
          dlsym(library, "GOMP_loop_ull_guided_next"));
      g.loopEndNowait = reinterpret_cast<decltype(g.loopEndNowait)>(
          dlsym(library, "GOMP_loop_end_nowait"));
    }
    if (!g.parallel || !g.barrier || !g.threadNum || !g.numThreads ||
        !g.guidedStart || !g.guidedNext || !g.loopEndNowait) {
      g = Gomp();
      std::fprintf(stderr, "lazymlir: the GNU OpenMP runtime (libgomp.so.1) "
                           "is not available; parallel loops run on one "
                           "thread\n");
    }
    return g;
  }();
  return resolved;
}

// Set while this thread runs a parallel region alone, without a libgomp
// team (it may itself be a thread of some outer team, whose numbers would
// hand it only part of the iterations).
thread_local bool alone = false;

int threadNum() { return alone || !gomp().threadNum ? 0 : gomp().threadNum(); }
int numThreads() {
  return alone || !gomp().numThreads ? 1 : gomp().numThreads();
}

[[noreturn]] void unsupported(const char *what) {
  std::fprintf(stderr,
               "lazymlir: compiled code asked the OpenMP runtime for "
               "%s, which lazymlir's runtime does not implement\n",
               what);
  std::abort();
}

struct Ident; // the source location argument; unused

// The outlined region: (global thread id*, bound thread id*, captured...).
using Microtask = void (*)(int32_t *, int32_t *, ...);
constexpr int kMaxCaptures = 8; // OpenMPIRBuilder passes one aggregate

struct Fork {
  Microtask task;
  int argc;
  void *args[kMaxCaptures];
  // The team thread that takes no chunk of a guided loop while the host
  // is busy (-1: none), and whether some thread found the loop exhausted.
  int32_t reserved = -1;
  std::atomic<bool> exhausted{false};
};

// The fork whose region this thread is running.
thread_local Fork *currentFork = nullptr;

template <size_t> using Pointer = void *;

template <size_t... I>
void invokeWith(const Fork &fork, int32_t *gtid, int32_t *btid,
                std::index_sequence<I...>) {
  // The microtask is defined with exactly argc pointer parameters.
  using Exact = void (*)(int32_t *, int32_t *, Pointer<I>...);
  reinterpret_cast<Exact>(fork.task)(gtid, btid, fork.args[I]...);
}

template <size_t... N> constexpr auto makeInvokers(std::index_sequence<N...>) {
  using Invoker = void (*)(const Fork &, int32_t *, int32_t *);
  return std::array<Invoker, sizeof...(N)>{
      [](const Fork &fork, int32_t *gtid, int32_t *btid) {
        invokeWith(fork, gtid, btid, std::make_index_sequence<N>());
      }...};
}

void runMember(void *data) {
  static constexpr auto invokers =
      makeInvokers(std::make_index_sequence<kMaxCaptures + 1>());
  Fork &fork = *static_cast<Fork *>(data);
  Fork *outer = std::exchange(currentFork, &fork);
  int32_t tid = threadNum();
  int32_t btid = tid;
  invokers[fork.argc](fork, &tid, &btid);
  currentFork = outer;
}

// Threads requested for the next fork by this thread (0: the default).
thread_local int32_t requestedThreads = 0;

// Whether this thread runs compiled code in the background, and how many
// host threads are blocked waiting for such runs.
thread_local bool inBackground = false;
std::atomic<int> hostWaits{0};

int32_t cores() {
  static const int32_t count =
      std::max(1u, std::thread::hardware_concurrency());
  return count;
}

bool hostBusy() { return hostWaits.load(std::memory_order_relaxed) == 0; }

// Reserved threads sleep here until the host waits or their loop is done.
std::mutex reservedMutex;
std::condition_variable reservedWakeup;

void wakeReserved() {
  // Taking the mutex orders the change before a sleeper's next check.
  {
    std::lock_guard<std::mutex> lock(reservedMutex);
  }
  reservedWakeup.notify_all();
}

int32_t globalThreadNum(Ident *) { return threadNum(); }

void pushNumThreads(Ident *, int32_t, int32_t threads) {
  requestedThreads = threads;
}

void forkCall(Ident *, int32_t argc, Microtask task, ...) {
  if (argc < 0 || argc > kMaxCaptures)
    unsupported("a parallel region with more than 8 captured arguments");
  Fork fork{task, argc, {}};
  va_list captures;
  va_start(captures, task);
  for (int i = 0; i < argc; ++i)
    fork.args[i] = va_arg(captures, void *);
  va_end(captures);
  int32_t requested = std::exchange(requestedThreads, 0);
  int32_t threads = requested > 0 ? requested : cores();
  // In the background while the host is busy (it may be tracing on a core
  // of its own), a team as large as the machine keeps its last thread out
  // of guided loops until the host waits: it joins then for what is left,
  // instead of the whole region running short of a thread.
  if (inBackground && hostBusy() && threads >= cores() && threads > 1)
    fork.reserved = threads - 1;
  if (threads == 1 || !gomp().parallel) {
    bool outer = std::exchange(alone, true);
    runMember(&fork);
    alone = outer;
  } else
    gomp().parallel(&runMember, &fork, threads, 0);
}

} // namespace

void runOnTeam(int threads, void (*fn)(void *), void *data) {
  if (threads <= 1 || !gomp().parallel || numThreads() > 1) {
    bool outer = std::exchange(alone, true);
    fn(data);
    alone = outer;
    return;
  }
  gomp().parallel(fn, data, static_cast<unsigned>(threads), 0);
}

int teamCores() { return cores(); }

namespace {

constexpr int32_t kStaticSchedule = 34; // kmp_sch_static, unchunked

// This thread's share of [*lower, *upper] (inclusive): a contiguous block,
// the first (trip count % team size) threads taking one more iteration. An
// empty share is returned as upper = lower - 1 (the caller's trip count,
// upper - lower + 1, is then 0 in its unsigned arithmetic).
template <typename T>
void staticInit(Ident *, int32_t, int32_t schedule, int32_t *lastIteration,
                T *lower, T *upper, std::make_signed_t<T> *stride,
                std::make_signed_t<T> increment, std::make_signed_t<T>) {
  using U = std::make_unsigned_t<T>;
  if (schedule != kStaticSchedule)
    unsupported("a schedule other than static");
  if (increment != 1)
    unsupported("a worksharing loop with a step other than 1");
  U first = static_cast<U>(*lower);
  bool empty = std::is_signed_v<T> ? *upper < *lower : false;
  U trip = empty ? 0 : static_cast<U>(static_cast<U>(*upper) - first) + 1;
  U team = static_cast<U>(numThreads());
  U tid = static_cast<U>(threadNum());
  U share = trip / team, extra = trip % team;
  U begin = tid * share + std::min(tid, extra);
  U count = share + (tid < extra ? 1 : 0);
  *lower = static_cast<T>(first + begin);
  *upper = static_cast<T>(first + begin + count - 1);
  if (lastIteration)
    *lastIteration = count != 0 && begin + count == trip;
  *stride = static_cast<std::make_signed_t<T>>(trip);
}

void staticFini(Ident *, int32_t) {}

// Guided worksharing loops (lazymlir-schedule-worksharing): each thread asks
// for chunks of [lower, upper] (inclusive), each the remaining iterations
// divided by the team size, until none is left. libgomp hands them out
// (GOMP_loop_ull_guided_*), so a thread whose core is busy with something
// else (the Python thread tracing the next step) simply takes fewer.
constexpr int32_t kGuidedSchedule = 36;         // kmp_sch_guided_chunked
constexpr int32_t kScheduleModifiers = 7 << 29; // (non)monotonic, simd

struct Dispatch {
  ull begin, end, chunk; // [begin, end)
  bool started;
};
thread_local Dispatch dispatch;

template <typename T>
void dispatchInit(Ident *, int32_t, int32_t schedule, T lower, T upper,
                  std::make_signed_t<T> increment,
                  std::make_signed_t<T> chunk) {
  if ((schedule & ~kScheduleModifiers) != kGuidedSchedule)
    unsupported("a schedule other than static or guided");
  if (increment != 1)
    unsupported("a worksharing loop with a step other than 1");
  dispatch = {static_cast<ull>(lower), static_cast<ull>(upper) + 1,
              static_cast<ull>(std::max<std::make_signed_t<T>>(chunk, 1)),
              false};
}

template <typename T>
int32_t dispatchNext(Ident *, int32_t, int32_t *lastIteration, T *lower,
                     T *upper, std::make_signed_t<T> *stride) {
  ull begin = 0, end = 0;
  bool more, team = numThreads() != 1;
  if (!team) { // the whole range, once
    more = !dispatch.started && dispatch.begin < dispatch.end;
    begin = dispatch.begin;
    end = dispatch.end;
  } else {
    Fork *fork = currentFork;
    if (!dispatch.started && fork && fork->reserved == threadNum()) {
      // The reserved thread: sleep while the host is busy, until the others
      // have run out of chunks (then join the loop, which is empty).
      std::unique_lock<std::mutex> lock(reservedMutex);
      reservedWakeup.wait(lock, [&] {
        return !hostBusy() || fork->exhausted.load(std::memory_order_acquire);
      });
    }
    more = dispatch.started
               ? gomp().guidedNext(&begin, &end)
               : gomp().guidedStart(true, dispatch.begin, dispatch.end, 1,
                                    dispatch.chunk, &begin, &end);
    if (!more && fork && fork->reserved >= 0 &&
        !fork->exhausted.exchange(true, std::memory_order_acq_rel))
      wakeReserved();
  }
  dispatch.started = true;
  if (!more) {
    if (team)
      gomp().loopEndNowait(); // the caller's __kmpc_barrier follows
    return 0;
  }
  *lower = static_cast<T>(begin);
  *upper = static_cast<T>(end - 1);
  *stride = 1;
  if (lastIteration)
    *lastIteration = end == dispatch.end;
  return 1;
}

void barrier(Ident *, int32_t) {
  if (gomp().barrier)
    gomp().barrier();
}

} // namespace

BackgroundScope::BackgroundScope(bool background) : previous(inBackground) {
  inBackground = background;
}
BackgroundScope::~BackgroundScope() { inBackground = previous; }

void beginHostWait() {
  hostWaits.fetch_add(1, std::memory_order_relaxed);
  wakeReserved();
}
void endHostWait() { hostWaits.fetch_sub(1, std::memory_order_relaxed); }

const std::vector<RuntimeSymbol> &openMPEntryPoints() {
  static const std::vector<RuntimeSymbol> symbols = {
      {"__kmpc_global_thread_num", reinterpret_cast<void *>(&globalThreadNum)},
      {"__kmpc_push_num_threads", reinterpret_cast<void *>(&pushNumThreads)},
      {"__kmpc_fork_call", reinterpret_cast<void *>(&forkCall)},
      {"__kmpc_for_static_init_4",
       reinterpret_cast<void *>(&staticInit<int32_t>)},
      {"__kmpc_for_static_init_4u",
       reinterpret_cast<void *>(&staticInit<uint32_t>)},
      {"__kmpc_for_static_init_8",
       reinterpret_cast<void *>(&staticInit<int64_t>)},
      {"__kmpc_for_static_init_8u",
       reinterpret_cast<void *>(&staticInit<uint64_t>)},
      {"__kmpc_for_static_fini", reinterpret_cast<void *>(&staticFini)},
      {"__kmpc_dispatch_init_4u",
       reinterpret_cast<void *>(&dispatchInit<uint32_t>)},
      {"__kmpc_dispatch_init_8u",
       reinterpret_cast<void *>(&dispatchInit<uint64_t>)},
      {"__kmpc_dispatch_next_4u",
       reinterpret_cast<void *>(&dispatchNext<uint32_t>)},
      {"__kmpc_dispatch_next_8u",
       reinterpret_cast<void *>(&dispatchNext<uint64_t>)},
      {"__kmpc_barrier", reinterpret_cast<void *>(&barrier)},
  };
  return symbols;
}

} // namespace lazymlir

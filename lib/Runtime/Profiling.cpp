//===- Profiling.cpp - clock reads around kernel calls --------------------===//

#include "Profiling.h"

#include <ctime>

namespace lazymlir {

namespace {

thread_local std::vector<ProfileEvent> *currentEvents = nullptr;
thread_local int64_t callStart = 0;

/// CLOCK_MONOTONIC in nanoseconds: Python's time.monotonic_ns(), so the
/// profiler can place kernel calls inside the graph runs it times.
int64_t now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

} // namespace

extern "C" void lazymlirProfileBegin(int64_t) { callStart = now(); }

extern "C" void lazymlirProfileEnd(int64_t site) {
  if (currentEvents)
    currentEvents->push_back({site, callStart, now()});
}

ProfileScope::ProfileScope(std::vector<ProfileEvent> &sink, std::mutex &mutex)
    : outer(currentEvents), sink(sink), mutex(mutex) {
  currentEvents = &events;
}

ProfileScope::~ProfileScope() {
  currentEvents = outer;
  std::lock_guard<std::mutex> lock(mutex);
  sink.insert(sink.end(), events.begin(), events.end());
}

} // namespace lazymlir

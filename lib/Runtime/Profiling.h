//===- Profiling.h - clock reads around kernel calls ------------*- C++ -*-===//
//
// Graphs compiled for the profiler (CpuPipelineSettings::profile) call
// __lazymlir_profile_begin/end(site) around each kernel call
// (lazymlir-instrument-kernels). These record, for the thread that runs the
// entry, one ProfileEvent per call into the sink of the innermost
// ProfileScope; without one they record nothing.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_PROFILING_H
#define LAZYMLIR_RUNTIME_PROFILING_H

#include "lazymlir/Runtime/CpuExecutable.h"

#include <cstdint>
#include <mutex>
#include <vector>

namespace lazymlir {

extern "C" void lazymlirProfileBegin(int64_t site);
extern "C" void lazymlirProfileEnd(int64_t site);

/// While alive, this thread's kernel calls are recorded; on destruction they
/// are appended to `sink` under `mutex`.
class ProfileScope {
public:
  ProfileScope(std::vector<ProfileEvent> &sink, std::mutex &mutex);
  ~ProfileScope();
  ProfileScope(const ProfileScope &) = delete;
  ProfileScope &operator=(const ProfileScope &) = delete;

private:
  std::vector<ProfileEvent> events;
  std::vector<ProfileEvent> *outer;
  std::vector<ProfileEvent> &sink;
  std::mutex &mutex;
};

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_PROFILING_H

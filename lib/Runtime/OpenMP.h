//===- OpenMP.h - the OpenMP entry points compiled code calls ---*- C++ -*-===//
//
// Parallel loops are lowered by upstream MLIR (convert-scf-to-openmp, then
// the OpenMP translation's OpenMPIRBuilder), which emits calls into LLVM's
// OpenMP runtime ABI (__kmpc_*). We do not load that runtime: these functions
// implement the few entry points our pipeline emits over the GNU OpenMP
// runtime (libgomp) that the process already uses, so that compiled graphs
// and eager PyTorch share one runtime and its thread management instead of
// two pools of spinning threads fighting over the cores.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_OPENMP_H
#define LAZYMLIR_RUNTIME_OPENMP_H

#include <vector>

namespace lazymlir {

struct RuntimeSymbol {
  const char *name;
  void *address;
};

/// The __kmpc_* functions to bind in the JIT, by name.
const std::vector<RuntimeSymbol> &openMPEntryPoints();

/// Runs fn(data) on every thread of a team of `threads` (libgomp's, the one
/// compiled parallel loops use); on the calling thread alone when `threads`
/// is 1, when libgomp is missing, or when the caller is already a member of
/// a team (no nested parallelism).
void runOnTeam(int threads, void (*fn)(void *), void *data);

/// The cores a team uses by default.
int teamCores();

/// Marks the current thread as running compiled code in the background
/// (CpuExecutable::run) until destroyed.
class BackgroundScope {
public:
  explicit BackgroundScope(bool background);
  ~BackgroundScope();

private:
  bool previous;
};

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_OPENMP_H

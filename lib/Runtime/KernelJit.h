//===- KernelJit.h - the process's JIT for kernels and graphs ---*- C++ -*-===//
//
// One LLJIT per process. Kernels live in JITDylibs shared by every graph
// compiled with the same options, one per code generation tier, each kernel
// loaded once (concurrent requests for one kernel wait for the first). A
// graph's entry module is linked into a JITDylib of its own (its globals:
// constants, the check flag) that resolves kernels from the Full tier first,
// then the Fast one. Internal to the runtime (and the compiler library);
// no MLIR header.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_KERNELJIT_H
#define LAZYMLIR_RUNTIME_KERNELJIT_H

#include "KernelCompiler.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace llvm::orc {
class JITDylib;
class LLJIT;
} // namespace llvm::orc

namespace lazymlir {

/// Native target and asm printer, once per process.
void initializeLLVMOnce();

/// A graph's entry module, linked: its JITDylib and the addresses runs use.
struct LinkedGraph {
  llvm::orc::JITDylib *dylib = nullptr;
  void (*entry)(void **) = nullptr;
  std::atomic<int32_t> *checkFlag = nullptr;
};

class KernelJit {
public:
  static KernelJit &get();

  enum class Origin { Process, Disk, Compiled };

  /// The JITDylib of kernels compiled with `options` at `tier`.
  llvm::orc::JITDylib &kernels(const std::string &options, Tier tier);
  bool isLoaded(llvm::orc::JITDylib &kernels, const std::string &name);

  /// Makes kernel `name` available in `kernels`: already loaded (Process),
  /// or the object `produce` returns (and says where it came from) is
  /// loaded. A kernel another thread is producing is waited for; an
  /// exception of `produce` leaves nothing loaded and propagates.
  Origin ensure(llvm::orc::JITDylib &kernels, const std::string &name,
                const std::function<std::pair<std::string, Origin>()> &produce);

  /// Loads a graph's entry object next to the kernels of `options` and finds
  /// `<entry>_packed` and, with `hasChecks`, the check flag.
  LinkedGraph link(const std::string &options, const std::string &object,
                   const std::string &entry, bool hasChecks,
                   const char *checkFlagSymbol);
  void unlink(const LinkedGraph &graph);

  /// Kernel sources kept for their Full-tier recompile.
  void keepSource(const std::string &options, const std::string &name,
                  const std::string &text);
  std::optional<std::string> source(const std::string &options,
                                    const std::string &name);
  void dropSource(const std::string &options, const std::string &name);

private:
  KernelJit();
  void add(llvm::orc::JITDylib &dylib, const std::string &object,
           const std::string &name);
  void *lookup(llvm::orc::JITDylib &dylib, const std::string &name);

  std::unique_ptr<llvm::orc::LLJIT> jit;
  llvm::orc::JITDylib *runtime = nullptr;
  std::mutex mutex;
  std::condition_variable changed;
  std::set<std::string> loaded, pending;
  std::map<std::string, llvm::orc::JITDylib *> kernelDylibs;
  std::map<std::string, std::string> sources;
  uint64_t nextGraph = 0;
};

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_KERNELJIT_H

//===- KernelJit.cpp - the process's JIT for kernels and graphs -----------===//

#include "KernelJit.h"
#include "lazymlir/Runtime/Gemm.h"
#include "BufferPool.h"
#include "OpenMP.h"
#include "Profiling.h"

#include "mlir/ExecutionEngine/CRunnerUtils.h"

#include "llvm/ExecutionEngine/Orc/AbsoluteSymbols.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"

#include <cstdint>
#include <cstring>
#include <mutex>

namespace lazymlir {

namespace {
// float -> bfloat16 as eager's vectorized CPU conversion rounds (to nearest
// even; every NaN -> 0xFFFF, where c10::BFloat16's scalar one gives 0x7FC0).
// LLVM calls these for fptrunc to bf16 on hosts without a bf16 conversion
// instruction (no AVX512-BF16: Zen 3), and libgcc has them from GCC 13 only.
// The bf16 result is returned in xmm0, as a _Float16 is.
_Float16 truncToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  uint16_t out = (bits & 0x7fffffffu) > 0x7f800000u
                     ? 0xffff
                     : (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  _Float16 result;
  std::memcpy(&result, &out, sizeof out);
  return result;
}
extern "C" _Float16 lazymlirTruncSfBf2(float value) {
  return truncToBFloat16(value);
}
// double -> bfloat16 through float, as c10 converts.
extern "C" _Float16 lazymlirTruncDfBf2(double value) {
  return truncToBFloat16(static_cast<float>(value));
}
} // namespace

const char *tierName(Tier tier) { return tier == Tier::Full ? "full" : "fast"; }

void initializeLLVMOnce() {
  static std::once_flag flag;
  std::call_once(flag, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

KernelJit &KernelJit::get() {
  static KernelJit *jit = new KernelJit(); // never destroyed: JIT code
  return *jit;                             // may run during exit
}

KernelJit::KernelJit() {
  initializeLLVMOnce();
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    throw CompileError("lazymlir: cannot detect the host target: " +
                       llvm::toString(builder.takeError()));
  auto created = llvm::orc::LLJITBuilder()
                     .setJITTargetMachineBuilder(std::move(*builder))
                     .setPlatformSetUp(llvm::orc::setUpInactivePlatform)
                     .create();
  if (!created)
    throw CompileError("lazymlir: cannot create the JIT: " +
                       llvm::toString(created.takeError()));
  jit = std::move(*created);
  auto &es = jit->getExecutionSession();
  runtime = &es.createBareJITDylib("runtime");
  // Compiled code calls into the runtime (temporaries from our pool, the
  // OpenMP entry points, strided copies) and the process's libm. The JIT
  // searches only globally visible symbols, and Python loads extensions
  // privately, so the runtime's are bound by address.
  llvm::orc::SymbolMap symbols;
  auto bind = [&](const char *name, void *address) {
    symbols[es.intern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                                llvm::JITSymbolFlags::Exported};
  };
  bind("memrefCopy", reinterpret_cast<void *>(&memrefCopy));
  bind("_mlir_memref_to_llvm_aligned_alloc",
       reinterpret_cast<void *>(&lazymlirAlignedAlloc));
  bind("_mlir_memref_to_llvm_alloc", reinterpret_cast<void *>(&lazymlirAlloc));
  bind("_mlir_memref_to_llvm_free", reinterpret_cast<void *>(&lazymlirFree));
  bind("lazymlir_output_ready", reinterpret_cast<void *>(&lazymlirOutputReady));
  bind("__lazymlir_profile_begin",
       reinterpret_cast<void *>(&lazymlirProfileBegin));
  bind("__lazymlir_profile_end", reinterpret_cast<void *>(&lazymlirProfileEnd));
  bind("__truncsfbf2", reinterpret_cast<void *>(&lazymlirTruncSfBf2));
  bind("lazymlir_sgemm_batched",
       reinterpret_cast<void *>(&lazymlir_sgemm_batched));
  bind("lazymlir_bf16gemm_batched",
       reinterpret_cast<void *>(&lazymlir_bf16gemm_batched));
  bind("lazymlir_bf16gemm_bf16c_batched",
       reinterpret_cast<void *>(&lazymlir_bf16gemm_bf16c_batched));
  bind("__truncdfbf2", reinterpret_cast<void *>(&lazymlirTruncDfBf2));
  for (const RuntimeSymbol &symbol : openMPEntryPoints())
    bind(symbol.name, symbol.address);
  llvm::cantFail(runtime->define(llvm::orc::absoluteSymbols(symbols)));
  runtime->addGenerator(llvm::cantFail(
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
          jit->getDataLayout().getGlobalPrefix())));
}

llvm::orc::JITDylib &KernelJit::kernels(const std::string &options, Tier tier) {
  std::string key = std::string(tierName(tier)) + "|" + options;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = kernelDylibs.find(key);
  if (it != kernelDylibs.end())
    return *it->second;
  auto &dylib = jit->getExecutionSession().createBareJITDylib(
      "kernels" + std::to_string(kernelDylibs.size()) + "." + tierName(tier));
  dylib.setLinkOrder(
      {{runtime, llvm::orc::JITDylibLookupFlags::MatchExportedSymbolsOnly}});
  kernelDylibs[key] = &dylib;
  return dylib;
}

bool KernelJit::isLoaded(llvm::orc::JITDylib &kernels,
                         const std::string &name) {
  std::lock_guard<std::mutex> lock(mutex);
  return loaded.count(kernels.getName() + "/" + name);
}

KernelJit::Origin KernelJit::ensure(
    llvm::orc::JITDylib &kernels, const std::string &name,
    const std::function<std::pair<std::string, Origin>()> &produce) {
  std::string key = kernels.getName() + "/" + name;
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return !pending.count(key); });
    if (loaded.count(key))
      return Origin::Process;
    pending.insert(key);
  }
  auto done = [&](bool ok) {
    std::lock_guard<std::mutex> lock(mutex);
    pending.erase(key);
    if (ok)
      loaded.insert(key);
    changed.notify_all();
  };
  try {
    auto [object, origin] = produce();
    add(kernels, object, name);
    done(true);
    return origin;
  } catch (...) {
    done(false);
    throw;
  }
}

void KernelJit::add(llvm::orc::JITDylib &dylib, const std::string &object,
                    const std::string &name) {
  if (llvm::Error error = jit->addObjectFile(
          dylib, llvm::MemoryBuffer::getMemBufferCopy(object, name)))
    throw CompileError("lazymlir: loading compiled code failed: " +
                       llvm::toString(std::move(error)));
}

void *KernelJit::lookup(llvm::orc::JITDylib &dylib, const std::string &name) {
  auto address = jit->lookup(dylib, name);
  if (!address)
    throw CompileError(
        "lazymlir: symbol '" + name +
        "' missing after linking: " + llvm::toString(address.takeError()));
  return address->toPtr<void *>();
}

LinkedGraph KernelJit::link(const std::string &options,
                            const std::string &object, const std::string &entry,
                            bool hasChecks, const char *checkFlagSymbol) {
  llvm::orc::JITDylib &full = kernels(options, Tier::Full);
  llvm::orc::JITDylib &fast = kernels(options, Tier::Fast);
  uint64_t number;
  {
    std::lock_guard<std::mutex> lock(mutex);
    number = nextGraph++;
  }
  LinkedGraph graph;
  graph.dylib = &jit->getExecutionSession().createBareJITDylib(
      "graph" + std::to_string(number));
  auto exported = llvm::orc::JITDylibLookupFlags::MatchExportedSymbolsOnly;
  graph.dylib->setLinkOrder(
      {{&full, exported}, {&fast, exported}, {runtime, exported}});
  try {
    add(*graph.dylib, object, entry);
    graph.entry = reinterpret_cast<void (*)(void **)>(
        lookup(*graph.dylib, entry + "_packed"));
    // An i32 global, 4-byte aligned: accessed as an atomic int32_t.
    if (hasChecks)
      graph.checkFlag = static_cast<std::atomic<int32_t> *>(
          lookup(*graph.dylib, checkFlagSymbol));
  } catch (...) {
    unlink(graph);
    throw;
  }
  return graph;
}

void KernelJit::unlink(const LinkedGraph &graph) {
  if (graph.dylib)
    llvm::consumeError(jit->getExecutionSession().removeJITDylib(*graph.dylib));
}

void KernelJit::keepSource(const std::string &options, const std::string &name,
                           const std::string &text) {
  std::lock_guard<std::mutex> lock(mutex);
  sources[options + "/" + name] = text;
}

std::optional<std::string> KernelJit::source(const std::string &options,
                                             const std::string &name) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = sources.find(options + "/" + name);
  if (it == sources.end())
    return std::nullopt;
  return it->second;
}

void KernelJit::dropSource(const std::string &options,
                           const std::string &name) {
  std::lock_guard<std::mutex> lock(mutex);
  sources.erase(options + "/" + name);
}

} // namespace lazymlir

//===- CpuExecutable.cpp - compile and run linalg on the CPU --------------===//

#include "lazymlir/Runtime/CpuExecutable.h"
#include "lazymlir/Pipelines/Pipelines.h"
#include "DiskCache.h"
#include "OpenMP.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/ExecutionEngine/CRunnerUtils.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"

#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ExecutionEngine/Orc/AbsoluteSymbols.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <set>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <optional>
#include <sstream>

using namespace mlir;

namespace lazymlir {

const char *elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F16: return "f16";
  case ElementType::BF16: return "bf16";
  case ElementType::F32: return "f32";
  case ElementType::F64: return "f64";
  case ElementType::I1: return "i1";
  case ElementType::I8: return "i8";
  case ElementType::I16: return "i16";
  case ElementType::I32: return "i32";
  case ElementType::I64: return "i64";
  }
  return "?";
}

namespace {

/// The global lazymlir-guard-runtime-checks sets when a check fails.
constexpr const char *kCheckFlagSymbol = "__lazymlir_check_failed";

/// Bytes of one element (i1: a byte, as torch's bool).
size_t elementBytes(ElementType type) {
  switch (type) {
  case ElementType::I1:
  case ElementType::I8: return 1;
  case ElementType::F16:
  case ElementType::BF16:
  case ElementType::I16: return 2;
  case ElementType::F32:
  case ElementType::I32: return 4;
  case ElementType::F64:
  case ElementType::I64: return 8;
  }
  return 0;
}

std::optional<ElementType> toElementType(Type type) {
  if (type.isF16()) return ElementType::F16;
  if (type.isBF16()) return ElementType::BF16;
  if (type.isF32()) return ElementType::F32;
  if (type.isF64()) return ElementType::F64;
  if (type.isSignlessInteger(1)) return ElementType::I1;
  if (type.isSignlessInteger(8)) return ElementType::I8;
  if (type.isSignlessInteger(16)) return ElementType::I16;
  if (type.isSignlessInteger(32)) return ElementType::I32;
  if (type.isSignlessInteger(64)) return ElementType::I64;
  return std::nullopt;
}

const DialectRegistry &getRegistry() {
  static const DialectRegistry *registry = [] {
    auto *r = new DialectRegistry();
    registerAllDialects(*r);
    registerAllExtensions(*r);
    registerBuiltinDialectTranslation(*r);
    registerLLVMDialectTranslation(*r);
    registerOpenMPDialectTranslation(*r);
    return r;
  }();
  return *registry;
}

void initializeLLVMOnce() {
  static std::once_flag flag;
  std::call_once(flag, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

/// Collects every diagnostic of a context, so a failure reports what MLIR
/// said rather than just "failed".
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext &ctx)
      : handler(&ctx, [this](Diagnostic &diag) {
          llvm::raw_string_ostream os(text);
          os << diag.getLocation() << ": ";
          switch (diag.getSeverity()) {
          case DiagnosticSeverity::Error: os << "error: "; break;
          case DiagnosticSeverity::Warning: os << "warning: "; break;
          case DiagnosticSeverity::Note: os << "note: "; break;
          case DiagnosticSeverity::Remark: os << "remark: "; break;
          }
          os << diag << "\n";
          for (Diagnostic &note : diag.getNotes())
            os << note.getLocation() << ": note: " << note << "\n";
          return success();
        }) {}

  [[noreturn]] void fail(const std::string &stage) const {
    std::string message = "lazymlir: " + stage + " failed";
    message += text.empty() ? std::string(" (no diagnostic)")
                            : std::string(":\n") + text;
    throw CompileError(message);
  }

private:
  std::string text;
  ScopedDiagnosticHandler handler;
};

/// Serves the compiled code's temporaries. Graphs run again and again with
/// the same shapes, so freed blocks are kept by size and handed out again;
/// only past `kMaxCachedBytes` of idle blocks is memory returned to the
/// system. Thread-safe: graphs may run concurrently.
class BufferPool {
public:
  static BufferPool &get() {
    static BufferPool *pool = new BufferPool(); // never destroyed: JIT code
    return *pool;                               // may run during exit
  }

  void *allocate(size_t alignment, size_t size) {
    size = roundUp(std::max<size_t>(size, 1));
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = idle.find(size);
      if (it != idle.end() && !it->second.empty()) {
        void *block = it->second.back();
        it->second.pop_back();
        idleBytes -= size;
        return block;
      }
    }
    void *block = std::aligned_alloc(std::max(alignment, kAlignment), size);
    std::lock_guard<std::mutex> lock(mutex);
    sizes[block] = size;
    return block;
  }

  void release(void *block) {
    if (!block)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    size_t size = sizes.at(block);
    if (idleBytes + size > kMaxCachedBytes) {
      sizes.erase(block);
      std::free(block);
      return;
    }
    idle[size].push_back(block);
    idleBytes += size;
  }

  size_t trim() {
    std::lock_guard<std::mutex> lock(mutex);
    size_t freed = idleBytes;
    for (auto &[size, blocks] : idle)
      for (void *block : blocks) {
        sizes.erase(block);
        std::free(block);
      }
    idle.clear();
    idleBytes = 0;
    return freed;
  }

  size_t idleSize() {
    std::lock_guard<std::mutex> lock(mutex);
    return idleBytes;
  }

private:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kMaxCachedBytes = size_t(1) << 30;
  static size_t roundUp(size_t size) {
    return (size + kAlignment - 1) / kAlignment * kAlignment;
  }

  std::mutex mutex;
  std::unordered_map<void *, size_t> sizes;
  std::unordered_map<size_t, std::vector<void *>> idle;
  size_t idleBytes = 0;
};

extern "C" void *lazymlirAlignedAlloc(uint64_t alignment, uint64_t size) {
  return BufferPool::get().allocate(alignment, size);
}
extern "C" void *lazymlirAlloc(uint64_t size) {
  return BufferPool::get().allocate(0, size);
}
extern "C" void lazymlirFree(void *block) { BufferPool::get().release(block); }

} // namespace

void *allocateBuffer(size_t bytes) {
  return BufferPool::get().allocate(0, bytes);
}
void releaseBuffer(void *block) { BufferPool::get().release(block); }
size_t trimBufferPool() { return BufferPool::get().trim(); }
size_t idleBufferBytes() { return BufferPool::get().idleSize(); }

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The disk cache and the JIT tell kernels and graphs compiled with
/// different options apart by this.
std::string describeOptions(const CompileOptions &options, unsigned threads) {
  std::ostringstream os;
  os << "entry=" << options.entry << ";opt=" << options.optLevel
     << ";fusion=" << options.fusion << ";nhwc=" << options.channelsLast
     << ";threads=" << threads << ";checks=" << options.runtimeChecks;
  return os.str();
}

unsigned resolvedThreads(const CompileOptions &options) {
  return options.threads ? options.threads
                         : std::max(1u, std::thread::hardware_concurrency());
}

void fillPipelineOptions(CpuPipelineOptions &pipeline,
                         const CompileOptions &options) {
  pipeline.entry = options.entry;
  pipeline.fusion = options.fusion;
  pipeline.channelsLast = options.channelsLast;
  pipeline.runtimeChecks = options.runtimeChecks;
  pipeline.threads = resolvedThreads(options);
  // Code is compiled for the host (hostTargetMachine): AVX-512 has a vector
  // ldexp (vscalefps) for exp's 2^n.
  pipeline.useLdexp = llvm::sys::getHostCPUFeatures().lookup("avx512f");
}

std::unique_ptr<llvm::TargetMachine> hostTargetMachine(unsigned optLevel) {
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    throw CompileError("lazymlir: cannot detect the host target: " +
                       llvm::toString(builder.takeError()));
  if (getenv("LZ_CG")) { int c = atoi(getenv("LZ_CG")); builder->setCodeGenOptLevel(c == 0 ? llvm::CodeGenOptLevel::None : c == 1 ? llvm::CodeGenOptLevel::Less : c == 2 ? llvm::CodeGenOptLevel::Default : llvm::CodeGenOptLevel::Aggressive); } else
  builder->setCodeGenOptLevel(optLevel >= 3   ? llvm::CodeGenOptLevel::Aggressive
                              : optLevel >= 1 ? llvm::CodeGenOptLevel::Default
                                              : llvm::CodeGenOptLevel::None);
  // Position-independent: the JIT links objects anywhere in the address
  // space, far from the process's libm and from each other.
  builder->setRelocationModel(llvm::Reloc::PIC_);
  auto machine = builder->createTargetMachine();
  if (!machine)
    throw CompileError("lazymlir: cannot create the host target machine: " +
                       llvm::toString(machine.takeError()));
  return std::move(*machine);
}

/// `void <entry>_packed(void **args)`: calls `entry` with each argument
/// loaded from the pointer in args[i] (the runtime's argument block).
void addPackedWrapper(llvm::Module &module, llvm::Function &entry,
                      const std::string &name) {
  llvm::LLVMContext &ctx = module.getContext();
  llvm::IRBuilder<> b(ctx);
  auto *type = llvm::FunctionType::get(b.getVoidTy(), b.getPtrTy(), false);
  auto *wrapper = llvm::Function::Create(
      type, llvm::GlobalValue::ExternalLinkage, name, module);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", wrapper));
  llvm::SmallVector<llvm::Value *> args;
  for (auto [i, arg] : llvm::enumerate(entry.args())) {
    llvm::Value *slot =
        b.CreateGEP(b.getPtrTy(), wrapper->getArg(0), b.getInt64(i));
    llvm::Value *pointer = b.CreateLoad(b.getPtrTy(), slot);
    args.push_back(b.CreateLoad(arg.getType(), pointer));
  }
  b.CreateCall(&entry, args);
  b.CreateRetVoid();
}

struct ObjectTimes {
  double translate = 0, optimize = 0, codegen = 0;
  int64_t instructions = 0, bytes = 0;
};

/// An LLVM-dialect module to object code for the host, optimized at
/// `optLevel`; every definition but `keep` becomes internal. With
/// `packedEntry`, adds `<packedEntry>_packed` (kept too).
std::string emitObject(ModuleOp module, const std::vector<std::string> &keep,
                       unsigned optLevel, const std::string &packedEntry,
                       ObjectTimes &times) {
  auto start = Clock::now();
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext);
  if (!llvmModule)
    throw CompileError("lazymlir: translation to LLVM IR failed");
  std::unique_ptr<llvm::TargetMachine> machine = hostTargetMachine(optLevel);
  ExecutionEngine::setupTargetTripleAndDataLayout(llvmModule.get(),
                                                  machine.get());
  std::vector<std::string> kept = keep;
  if (!packedEntry.empty()) {
    llvm::Function *entry = llvmModule->getFunction(packedEntry);
    if (!entry)
      throw CompileError("lazymlir: entry '" + packedEntry +
                         "' missing after lowering");
    addPackedWrapper(*llvmModule, *entry, packedEntry + "_packed");
    kept.push_back(packedEntry + "_packed");
  }
  for (llvm::GlobalValue &value : llvmModule->global_values())
    if (!value.isDeclaration() &&
        std::find(kept.begin(), kept.end(), value.getName()) == kept.end())
      value.setLinkage(llvm::GlobalValue::InternalLinkage);
  times.translate += since(start);

  start = Clock::now();
  auto optimize = makeOptimizingTransformer(optLevel, /*sizeLevel=*/0,
                                            machine.get());
  if (llvm::Error error = optimize(llvmModule.get()))
    throw CompileError("lazymlir: LLVM optimization failed: " +
                       llvm::toString(std::move(error)));
  times.instructions += llvmModule->getInstructionCount();
  times.optimize += since(start);

  start = Clock::now();
  llvm::SmallVector<char, 0> object;
  {
    llvm::raw_svector_ostream os(object);
    llvm::legacy::PassManager codegen;
    if (machine->addPassesToEmitFile(codegen, os, nullptr,
                                     llvm::CodeGenFileType::ObjectFile))
      throw CompileError("lazymlir: the host target cannot emit objects");
    codegen.run(*llvmModule);
  }
  times.codegen += since(start);
  times.bytes += object.size();
  return std::string(object.data(), object.size());
}

/// The process's JIT: compiled kernels, shared by every graph compiled with
/// the same options (one JITDylib per options), each loaded once; each graph's
/// entry module in a JITDylib of its own (its globals: constants, the check
/// flag), removed with the executable.
class KernelJit {
public:
  static KernelJit &get() {
    static KernelJit *jit = new KernelJit(); // never destroyed: JIT code
    return *jit;                             // may run during exit
  }

  enum class Origin { Process, Disk, Compiled };

  /// Makes kernel `name` available in `kernels`: already loaded, or the
  /// object `produce` returns (read from disk or compiled: it says which)
  /// is loaded. A kernel being produced by another thread is waited for.
  Origin ensure(llvm::orc::JITDylib &kernels, const std::string &name,
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

  void add(llvm::orc::JITDylib &dylib, const std::string &object,
           const std::string &name) {
    if (llvm::Error error = jit->addObjectFile(
            dylib, llvm::MemoryBuffer::getMemBufferCopy(object, name)))
      throw CompileError("lazymlir: loading compiled code failed: " +
                         llvm::toString(std::move(error)));
  }

  llvm::orc::JITDylib &kernelsFor(const std::string &options) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = kernelDylibs.find(options);
    if (it != kernelDylibs.end())
      return *it->second;
    auto &dylib = jit->getExecutionSession().createBareJITDylib(
        "kernels" + std::to_string(kernelDylibs.size()));
    dylib.setLinkOrder({{runtime, llvm::orc::JITDylibLookupFlags::
                                      MatchExportedSymbolsOnly}});
    kernelDylibs[options] = &dylib;
    return dylib;
  }

  llvm::orc::JITDylib &newGraph(llvm::orc::JITDylib &kernels) {
    auto &dylib = jit->getExecutionSession().createBareJITDylib(
        "graph" + std::to_string(nextGraph++));
    dylib.setLinkOrder(
        {{&kernels, llvm::orc::JITDylibLookupFlags::MatchExportedSymbolsOnly},
         {runtime, llvm::orc::JITDylibLookupFlags::MatchExportedSymbolsOnly}});
    return dylib;
  }

  void removeGraph(llvm::orc::JITDylib &dylib) {
    llvm::consumeError(jit->getExecutionSession().removeJITDylib(dylib));
  }

  void *lookup(llvm::orc::JITDylib &dylib, const std::string &name) {
    auto address = jit->lookup(dylib, name);
    if (!address)
      throw CompileError("lazymlir: symbol '" + name +
                         "' missing after linking: " +
                         llvm::toString(address.takeError()));
    return address->toPtr<void *>();
  }

private:
  KernelJit() {
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
    runtime = &jit->getExecutionSession().createBareJITDylib("runtime");
    // Compiled code calls into the runtime (temporaries from our pool, the
    // OpenMP entry points, strided copies) and the process's libm. The JIT
    // searches only globally visible symbols, and Python loads extensions
    // privately, so the runtime's are bound by address.
    llvm::orc::SymbolMap symbols;
    auto &es = jit->getExecutionSession();
    auto add = [&](const char *name, void *address) {
      symbols[es.intern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                                  llvm::JITSymbolFlags::Exported};
    };
    add("memrefCopy", reinterpret_cast<void *>(&memrefCopy));
    add("_mlir_memref_to_llvm_aligned_alloc",
        reinterpret_cast<void *>(&lazymlirAlignedAlloc));
    add("_mlir_memref_to_llvm_alloc", reinterpret_cast<void *>(&lazymlirAlloc));
    add("_mlir_memref_to_llvm_free", reinterpret_cast<void *>(&lazymlirFree));
    for (const RuntimeSymbol &symbol : openMPEntryPoints())
      add(symbol.name, symbol.address);
    llvm::cantFail(runtime->define(llvm::orc::absoluteSymbols(symbols)));
    runtime->addGenerator(llvm::cantFail(
        llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
            jit->getDataLayout().getGlobalPrefix())));
  }

  std::unique_ptr<llvm::orc::LLJIT> jit;
  llvm::orc::JITDylib *runtime = nullptr;
  std::mutex mutex;
  std::condition_variable changed;
  std::set<std::string> loaded, pending;
  std::map<std::string, llvm::orc::JITDylib *> kernelDylibs;
  std::atomic<uint64_t> nextGraph{0};
};

/// Whether the build's code identity is known (the library file read).
std::string computeCodeIdentity() {
  std::string identity = "lazymlir-native;";
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&computeCodeIdentity), &info) &&
      info.dli_fname) {
    auto file = llvm::MemoryBuffer::getFile(info.dli_fname, false, false);
    if (file)
      identity += sha256Hex((*file)->getBuffer().str());
    else
      identity += std::string("unread:") + info.dli_fname;
  }
  identity += ";llvm=" LLVM_VERSION_STRING ";cpu=";
  identity += llvm::sys::getHostCPUName().str();
  std::vector<std::string> features;
  for (const auto &feature : llvm::sys::getHostCPUFeatures())
    features.push_back((feature.second ? "+" : "-") + feature.first().str());
  std::sort(features.begin(), features.end());
  for (const std::string &feature : features)
    identity += feature + ",";
  return identity;
}

std::atomic<uint64_t> graphDiskHits{0}, graphDiskMisses{0};

std::string kernelCacheKey(const std::string &options, const std::string &name) {
  return sha256Hex(codeIdentity() + "\n" + "kernel\n" + options + "\n" + name);
}

std::string graphCacheKey(const std::string &options, const std::string &source) {
  return sha256Hex(codeIdentity() + "\n" + "graph\n" + options + "\n" + source);
}

/// A graph's disk entry: what the executable needs besides machine code,
/// the kernels its entry calls, then the entry module's object.
struct GraphRecord {
  std::vector<TensorSignature> inputs, outputs;
  int64_t numKernels = 0;
  bool hasChecks = false;
  std::vector<std::string> kernels;
  std::string object;

  std::string serialize() const {
    std::ostringstream os;
    os << "lazymlir-graph 1\n" << numKernels << " " << hasChecks << "\n";
    for (const auto *list : {&inputs, &outputs}) {
      os << list->size() << "\n";
      for (const TensorSignature &signature : *list) {
        os << int(signature.elementType) << " " << signature.shape.size();
        for (int64_t size : signature.shape)
          os << " " << size;
        os << "\n";
      }
    }
    os << kernels.size() << "\n";
    for (const std::string &kernel : kernels)
      os << kernel << "\n";
    os << object.size() << "\n";
    return os.str() + object;
  }

  /// False on anything malformed.
  bool parse(const std::string &payload) {
    std::istringstream is(payload);
    std::string magic;
    int version = 0;
    if (!(is >> magic >> version) || magic != "lazymlir-graph" || version != 1)
      return false;
    if (!(is >> numKernels >> hasChecks))
      return false;
    for (auto *list : {&inputs, &outputs}) {
      size_t count;
      if (!(is >> count) || count > (1u << 20))
        return false;
      for (size_t i = 0; i < count; ++i) {
        int type;
        size_t rank;
        if (!(is >> type >> rank) || type < 0 ||
            type > int(ElementType::I64) || rank > 64)
          return false;
        TensorSignature signature{ElementType(type), {}};
        signature.shape.resize(rank);
        for (int64_t &size : signature.shape)
          if (!(is >> size))
            return false;
        list->push_back(std::move(signature));
      }
    }
    size_t count;
    if (!(is >> count) || count > (1u << 20))
      return false;
    kernels.resize(count);
    for (std::string &kernel : kernels)
      if (!(is >> kernel))
        return false;
    size_t bytes;
    if (!(is >> bytes) || is.get() != '\n')
      return false;
    size_t offset = size_t(is.tellg());
    if (offset + bytes != payload.size())
      return false;
    object = payload.substr(offset);
    return true;
  }
};

/// The lowering of one outlined kernel (a module holding its function) to
/// object code, on a worker thread with a context of its own.
std::string compileKernel(const std::string &text, const std::string &name,
                          const CompileOptions &options, ObjectTimes &times,
                          double &llvmStage) {
  auto start = Clock::now();
  MLIRContext ctx(getRegistry(), MLIRContext::Threading::DISABLED);
  DiagnosticCollector diagnostics(ctx);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(text, ParserConfig(&ctx), name);
  if (!module)
    diagnostics.fail("parsing kernel " + name);
  CpuPipelineOptions pipeline;
  fillPipelineOptions(pipeline, options);
  PassManager pm(&ctx);
  buildCpuLLVMPipeline(pm, pipeline);
  if (failed(pm.run(*module)))
    diagnostics.fail("the CPU pipeline (LLVM stage) on kernel " + name);
  llvmStage += since(start);
  return emitObject(*module, {name}, getenv("LZ_OPT") ? atoi(getenv("LZ_OPT")) : options.optLevel, "", times);
}

} // namespace

const std::string &codeIdentity() {
  static const std::string identity = computeCodeIdentity();
  return identity;
}

void configureDiskCache(const std::string &directory, uint64_t maxBytes) {
  DiskCache::get().configure(directory, maxBytes);
}

DiskCacheCounts diskCacheCounts() {
  DiskCacheStats stats = DiskCache::get().stats();
  DiskCacheCounts counts;
  counts.graphHits = graphDiskHits;
  counts.graphMisses = graphDiskMisses;
  counts.hits = stats.hits;
  counts.misses = stats.misses;
  counts.corrupt = stats.corrupt;
  counts.writes = stats.writes;
  counts.evicted = stats.evicted;
  return counts;
}

std::vector<std::string> takeDiskCacheWarnings() {
  return DiskCache::get().takeWarnings();
}

std::optional<std::string> readDiskCacheEntry(const std::string &key) {
  return DiskCache::get().read(key);
}

void writeDiskCacheEntry(const std::string &key, const std::string &payload) {
  DiskCache::get().write(key, payload);
}

struct CpuExecutable::Impl {
  llvm::orc::JITDylib *graph = nullptr;
  void (*entry)(void **) = nullptr;
  std::vector<TensorSignature> inputs;
  std::vector<TensorSignature> outputs;
  std::string llvmDialect;
  std::string cacheKey;
  int64_t numKernels = 0;
  CompileStats stats;
  /// The packed entry point's arguments as 8-byte scalars: for each input,
  /// then each output, the memref descriptor (allocated pointer, aligned
  /// pointer, offset, sizes..., canonical strides...) with null pointers.
  std::vector<int64_t> argumentBlock;
  /// Where each buffer's allocated pointer sits in argumentBlock.
  std::vector<size_t> pointerSlots;
  /// Each buffer's size in bytes, inputs then outputs.
  std::vector<size_t> bufferBytes;
  /// The module's check flag (lazymlir-guard-runtime-checks), null when it
  /// has no checks; runs that have one hold `checkMutex`.
  std::atomic<int32_t> *checkFlag = nullptr;
  mutable std::mutex checkMutex;

  ~Impl() {
    if (graph)
      KernelJit::get().removeGraph(*graph);
  }

  void buildArgumentBlock() {
    for (const auto *list : {&inputs, &outputs}) {
      for (const TensorSignature &signature : *list) {
        size_t bytes = elementBytes(signature.elementType);
        for (int64_t size : signature.shape)
          bytes *= size;
        bufferBytes.push_back(bytes);
        pointerSlots.push_back(argumentBlock.size());
        argumentBlock.insert(argumentBlock.end(), {0, 0, 0});
        argumentBlock.insert(argumentBlock.end(), signature.shape.begin(),
                             signature.shape.end());
        std::vector<int64_t> strides(signature.shape.size());
        int64_t stride = 1;
        for (size_t d = strides.size(); d-- > 0;) {
          strides[d] = stride;
          stride *= signature.shape[d];
        }
        argumentBlock.insert(argumentBlock.end(), strides.begin(),
                             strides.end());
      }
    }
  }

  /// Loads the graph's entry object into a JITDylib of its own, next to its
  /// kernels, and finds the entry and the check flag.
  void link(llvm::orc::JITDylib &kernels, const std::string &object,
            const std::string &entryName, bool hasChecks) {
    KernelJit &jit = KernelJit::get();
    graph = &jit.newGraph(kernels);
    jit.add(*graph, object, entryName);
    entry = reinterpret_cast<void (*)(void **)>(
        jit.lookup(*graph, entryName + "_packed"));
    // An i32 global, 4-byte aligned: accessed as an atomic int32_t.
    if (hasChecks)
      checkFlag = static_cast<std::atomic<int32_t> *>(
          jit.lookup(*graph, kCheckFlagSymbol));
  }

  /// Calls the entry on buffers that match the signatures, inputs first.
  void invoke(const std::vector<void *> &data, bool background) const {
    std::vector<int64_t> scalars = argumentBlock;
    for (size_t i = 0; i < data.size(); ++i) {
      auto pointer = reinterpret_cast<int64_t>(data[i]);
      scalars[pointerSlots[i]] = pointer;
      scalars[pointerSlots[i] + 1] = pointer;
    }
    std::vector<void *> args(scalars.size());
    for (size_t i = 0; i < scalars.size(); ++i)
      args[i] = &scalars[i];
    if (!checkFlag) {
      BackgroundScope scope(background);
      entry(args.data());
      return;
    }
    std::lock_guard<std::mutex> lock(checkMutex);
    {
      BackgroundScope scope(background);
      entry(args.data());
    }
    if (checkFlag->exchange(0, std::memory_order_relaxed) != 0)
      throw CheckFailed();
  }
};

CpuExecutable::CpuExecutable(std::unique_ptr<Impl> impl)
    : impl(std::move(impl)) {}
CpuExecutable::~CpuExecutable() = default;

const std::vector<TensorSignature> &CpuExecutable::inputs() const {
  return impl->inputs;
}
const std::vector<TensorSignature> &CpuExecutable::outputs() const {
  return impl->outputs;
}
int64_t CpuExecutable::numKernels() const { return impl->numKernels; }
bool CpuExecutable::hasRuntimeChecks() const { return impl->checkFlag; }
const std::string &CpuExecutable::llvmDialect() const {
  return impl->llvmDialect;
}
const CompileStats &CpuExecutable::compileStats() const { return impl->stats; }
const std::string &CpuExecutable::cacheKey() const { return impl->cacheKey; }

std::unique_ptr<CpuExecutable>
CpuExecutable::load(const std::string &cacheKey, const CompileOptions &options) {
  if (!DiskCache::get().enabled())
    return nullptr;
  auto start = Clock::now();
  std::optional<std::string> payload = DiskCache::get().read(cacheKey);
  GraphRecord record;
  if (!payload || !record.parse(*payload)) {
    ++graphDiskMisses;
    return nullptr;
  }
  initializeLLVMOnce();
  std::string optionsKey = describeOptions(options, resolvedThreads(options));
  KernelJit &jit = KernelJit::get();
  llvm::orc::JITDylib &kernels = jit.kernelsFor(optionsKey);
  auto impl = std::make_unique<Impl>();
  struct Missing {};
  try {
    for (const std::string &name : record.kernels) {
      auto origin = jit.ensure(kernels, name, [&] {
        std::optional<std::string> object =
            DiskCache::get().read(kernelCacheKey(optionsKey, name));
        if (!object)
          throw Missing();
        return std::make_pair(std::move(*object), KernelJit::Origin::Disk);
      });
      ++(origin == KernelJit::Origin::Disk ? impl->stats.kernelsFromDisk
                                           : impl->stats.kernelsReused);
    }
  } catch (const Missing &) {
    ++graphDiskMisses; // compiled again, and written again
    return nullptr;
  }
  impl->inputs = std::move(record.inputs);
  impl->outputs = std::move(record.outputs);
  impl->numKernels = record.numKernels;
  impl->cacheKey = cacheKey;
  impl->buildArgumentBlock();
  impl->stats.distinctKernels = record.kernels.size();
  impl->stats.fromDisk = true;
  auto linkStart = Clock::now();
  impl->link(kernels, record.object, options.entry, record.hasChecks);
  impl->stats.link = since(linkStart);
  impl->stats.total = since(start);
  ++graphDiskHits;
  return std::unique_ptr<CpuExecutable>(new CpuExecutable(std::move(impl)));
}

std::unique_ptr<CpuExecutable>
CpuExecutable::compile(const std::string &source,
                       const CompileOptions &options) {
  initializeLLVMOnce();
  auto start = Clock::now();
  std::string optionsKey = describeOptions(options, resolvedThreads(options));
  std::string cacheKey = graphCacheKey(optionsKey, source);
  // A dump wants the LLVM dialect, which the disk cache does not keep.
  if (!options.keepLLVMDialect)
    if (auto cached = load(cacheKey, options))
      return cached;

  auto impl = std::make_unique<Impl>();
  impl->cacheKey = cacheKey;
  CompileStats &stats = impl->stats;
  // One context per compile: graphs are independent, and nothing of the
  // context is needed once the JIT holds the machine code.
  MLIRContext ctx(getRegistry(), MLIRContext::Threading::DISABLED);
  // torch-mlir's TMTensor ops (scatter, scan, sort) come in the generic form
  // as unregistered ops: the pipeline lowers them first, and its contract
  // check rejects any other unregistered op with a diagnostic.
  ctx.allowUnregisteredDialects();
  DiagnosticCollector diagnostics(ctx);

  auto phase = Clock::now();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, ParserConfig(&ctx), "input");
  if (!module)
    diagnostics.fail("parsing the linalg input");
  stats.parse = since(phase);
  (*module)->walk([&](Operation *) { ++stats.inputOps; });

  // The signature is read before lowering: afterwards results are
  // out-parameters and tensor types are gone. The contract pass (first in
  // the pipeline) rejects signatures this cannot express.
  if (auto func = module->lookupSymbol<func::FuncOp>(options.entry)) {
    auto collect = [](TypeRange types, std::vector<TensorSignature> &out) {
      for (Type type : types) {
        auto tensorType = dyn_cast<RankedTensorType>(type);
        if (!tensorType)
          return;
        auto elementType = toElementType(tensorType.getElementType());
        if (!elementType)
          return;
        out.push_back({*elementType, tensorType.getShape().vec()});
      }
    };
    collect(func.getArgumentTypes(), impl->inputs);
    collect(func.getResultTypes(), impl->outputs);
  }
  impl->buildArgumentBlock();

  CpuPipelineOptions pipelineOptions;
  fillPipelineOptions(pipelineOptions, options);
  phase = Clock::now();
  PassManager tensorStage(&ctx);
  buildCpuTensorPipeline(tensorStage, pipelineOptions);
  if (failed(tensorStage.run(*module)))
    diagnostics.fail("the CPU pipeline (tensor stage)");
  if (auto kernels = (*module)->getAttrOfType<IntegerAttr>("lazymlir.kernels"))
    impl->numKernels = kernels.getInt();
  stats.tensorStage = since(phase);

  phase = Clock::now();
  PassManager bufferizeStage(&ctx);
  buildCpuBufferizePipeline(bufferizeStage, pipelineOptions);
  if (failed(bufferizeStage.run(*module)))
    diagnostics.fail("the CPU pipeline (bufferize stage)");

  // Each outlined kernel leaves as the text of a module of its own (the
  // unit of compilation and of caching); the entry keeps a declaration.
  struct Kernel {
    std::string name, text;
  };
  std::vector<Kernel> kernels;
  for (auto func : llvm::make_early_inc_range(module->getOps<func::FuncOp>())) {
    if (!func->hasAttr("lazymlir.kernel"))
      continue;
    OwningOpRef<ModuleOp> holder = ModuleOp::create(func.getLoc());
    auto clone = cast<func::FuncOp>(func->clone());
    clone->removeAttr("lazymlir.kernel");
    clone.setPublic();
    holder->push_back(clone);
    Kernel kernel{func.getName().str(), {}};
    llvm::raw_string_ostream os(kernel.text);
    holder->print(os);
    kernels.push_back(std::move(kernel));
    func->removeAttr("lazymlir.kernel");
    func.eraseBody();
  }
  if (auto entry = module->lookupSymbol<func::FuncOp>(options.entry))
    entry.walk([&](func::CallOp) { ++stats.loopNests; });
  stats.distinctKernels = kernels.size();
  stats.bufferizeStage = since(phase);

  // The kernels, on worker threads; the entry module meanwhile on this one.
  KernelJit &jit = KernelJit::get();
  llvm::orc::JITDylib &kernelDylib = jit.kernelsFor(optionsKey);
  std::mutex statsMutex;
  std::string firstError;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < kernels.size();) {
      const Kernel &kernel = kernels[i];
      ObjectTimes times;
      double llvmStage = 0;
      try {
        auto origin = jit.ensure(kernelDylib, kernel.name, [&] {
          std::string key = kernelCacheKey(optionsKey, kernel.name);
          if (std::optional<std::string> object = DiskCache::get().read(key))
            return std::make_pair(std::move(*object), KernelJit::Origin::Disk);
          std::string object =
              compileKernel(kernel.text, kernel.name, options, times, llvmStage);
          DiskCache::get().write(key, object);
          return std::make_pair(std::move(object), KernelJit::Origin::Compiled);
        });
        std::lock_guard<std::mutex> lock(statsMutex);
        ++(origin == KernelJit::Origin::Compiled ? stats.kernelsCompiled
           : origin == KernelJit::Origin::Disk   ? stats.kernelsFromDisk
                                                 : stats.kernelsReused);
      } catch (const std::exception &error) {
        std::lock_guard<std::mutex> lock(statsMutex);
        if (firstError.empty())
          firstError = error.what();
      }
      std::lock_guard<std::mutex> lock(statsMutex);
      if (getenv("LZ_KT")) { std::string f = std::string(getenv("LZ_KT")) + "/" + kernel.name + ".mlir"; FILE *fp = fopen(f.c_str(), "w"); if (fp) { fputs(kernel.text.c_str(), fp); fclose(fp);} }
      if (getenv("LZ_KT")) fprintf(stderr, "KT %s mlir %.3f tr %.3f opt %.3f cg %.3f inst %ld\n", kernel.name.c_str(), llvmStage, times.translate, times.optimize, times.codegen, (long)times.instructions);
      stats.llvmStage += llvmStage;
      stats.translate += times.translate;
      stats.optimize += times.optimize;
      stats.codegen += times.codegen;
      stats.llvmInstructions += times.instructions;
      stats.objectBytes += times.bytes;
    }
  };
  unsigned workers = std::min<size_t>(
      std::max(1u, std::thread::hardware_concurrency()), kernels.size());
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < workers; ++i)
    threads.emplace_back(work);

  std::string entryObject;
  bool hasChecks = false;
  try {
    phase = Clock::now();
    PassManager llvmStage(&ctx);
    buildCpuLLVMPipeline(llvmStage, pipelineOptions);
    if (failed(llvmStage.run(*module)))
      diagnostics.fail("the CPU pipeline (LLVM stage)");
    // The check flag survives the lowering as an LLVM global of that name.
    hasChecks = SymbolTable::lookupSymbolIn(*module, kCheckFlagSymbol);
    if (options.keepLLVMDialect) {
      llvm::raw_string_ostream os(impl->llvmDialect);
      module->print(os);
      for (const Kernel &kernel : kernels)
        os << "\n// kernel " << kernel.name << " (before the LLVM stage)\n"
           << kernel.text;
    }
    std::lock_guard<std::mutex> lock(statsMutex);
    stats.llvmStage += since(phase);
  } catch (...) {
    for (std::thread &thread : threads)
      thread.join();
    throw;
  }
  // The entry only allocates and calls: cold code, optimized lightly.
  ObjectTimes times;
  std::vector<std::string> keep = {options.entry};
  if (hasChecks)
    keep.push_back(kCheckFlagSymbol);
  try {
    entryObject = emitObject(*module, keep, 0,
                             options.entry, times);
  } catch (...) {
    for (std::thread &thread : threads)
      thread.join();
    throw;
  }
  for (std::thread &thread : threads)
    thread.join();
  if (!firstError.empty())
    throw CompileError(firstError);
  stats.translate += times.translate;
  stats.optimize += times.optimize;
  stats.codegen += times.codegen;
  stats.llvmInstructions += times.instructions;
  stats.objectBytes += times.bytes;

  phase = Clock::now();
  impl->link(kernelDylib, entryObject, options.entry, hasChecks);
  stats.link = since(phase);

  if (DiskCache::get().enabled()) {
    GraphRecord record;
    record.inputs = impl->inputs;
    record.outputs = impl->outputs;
    record.numKernels = impl->numKernels;
    record.hasChecks = hasChecks;
    for (const Kernel &kernel : kernels)
      record.kernels.push_back(kernel.name);
    record.object = std::move(entryObject);
    DiskCache::get().write(cacheKey, record.serialize());
  }
  stats.total = since(start);
  return std::unique_ptr<CpuExecutable>(new CpuExecutable(std::move(impl)));
}


namespace {

std::string describe(const std::vector<int64_t> &dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i)
    os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

void checkBuffer(const BufferView &buffer, const TensorSignature &signature,
                 const char *kind, size_t index) {
  auto where = [&] { return std::string(kind) + " #" + std::to_string(index); };
  if (buffer.elementType != signature.elementType)
    throw std::invalid_argument(where() + ": element type " +
                                elementTypeName(buffer.elementType) +
                                ", expected " +
                                elementTypeName(signature.elementType));
  if (buffer.sizes != signature.shape)
    throw std::invalid_argument(where() + ": shape " + describe(buffer.sizes) +
                                ", expected " + describe(signature.shape));
  if (buffer.strides.size() != buffer.sizes.size())
    throw std::invalid_argument(where() + ": strides and sizes differ in rank");
  // The compiled code assumes the identity layout; a dimension of size 1 may
  // have any stride.
  int64_t expected = 1;
  for (size_t d = buffer.sizes.size(); d-- > 0;) {
    if (buffer.sizes[d] != 1 && buffer.strides[d] != expected)
      throw std::invalid_argument(where() + ": not contiguous (strides " +
                                  describe(buffer.strides) + ")");
    expected *= buffer.sizes[d];
  }
}

} // namespace

void CpuExecutable::checkCounts(size_t numInputs, size_t numOutputs) const {
  if (numInputs != impl->inputs.size() || numOutputs != impl->outputs.size())
    throw std::invalid_argument(
        "expected " + std::to_string(impl->inputs.size()) + " inputs and " +
        std::to_string(impl->outputs.size()) + " outputs, got " +
        std::to_string(numInputs) + " and " + std::to_string(numOutputs));
}

void CpuExecutable::run(const std::vector<BufferView> &inputs,
                        const std::vector<BufferView> &outputs,
                        bool background) const {
  checkCounts(inputs.size(), outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    checkBuffer(inputs[i], impl->inputs[i], "input", i);
  for (size_t i = 0; i < outputs.size(); ++i)
    checkBuffer(outputs[i], impl->outputs[i], "output", i);

  std::vector<void *> data;
  data.reserve(inputs.size() + outputs.size());
  for (const auto *list : {&inputs, &outputs})
    for (const BufferView &buffer : *list)
      data.push_back(buffer.data);
  impl->invoke(data, background);
}

void CpuExecutable::run(const std::vector<RawBuffer> &inputs,
                        const std::vector<RawBuffer> &outputs,
                        bool background) const {
  checkCounts(inputs.size(), outputs.size());
  std::vector<void *> data;
  data.reserve(inputs.size() + outputs.size());
  auto check = [&](const std::vector<RawBuffer> &buffers,
                   const std::vector<TensorSignature> &signatures,
                   const char *kind, size_t first) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      const TensorSignature &signature = signatures[i];
      size_t bytes = impl->bufferBytes[first + i];
      if (buffers[i].bytes != bytes)
        throw std::invalid_argument(
            std::string(kind) + " #" + std::to_string(i) + ": " +
            std::to_string(buffers[i].bytes) + " bytes, expected " +
            std::to_string(bytes) + " (" +
            elementTypeName(signature.elementType) + " " +
            describe(signature.shape) + ")");
      data.push_back(buffers[i].data);
    }
  };
  check(inputs, impl->inputs, "input", 0);
  check(outputs, impl->outputs, "output", inputs.size());
  impl->invoke(data, background);
}

} // namespace lazymlir

//===- CpuExecutable.cpp - compile and run linalg on the CPU --------------===//

#include "lazymlir/Runtime/CpuExecutable.h"
#include "lazymlir/Pipelines/Pipelines.h"
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

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
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

struct CpuExecutable::Impl {
  std::unique_ptr<ExecutionEngine> engine;
  void (*entry)(void **) = nullptr;
  std::vector<TensorSignature> inputs;
  std::vector<TensorSignature> outputs;
  std::string llvmDialect;
  int64_t numKernels = 0;
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

std::unique_ptr<CpuExecutable>
CpuExecutable::compile(const std::string &source,
                       const CompileOptions &options) {
  initializeLLVMOnce();
  // One context per compile: graphs are independent, and nothing of the
  // context is needed once the JIT holds the machine code.
  MLIRContext ctx(getRegistry(), MLIRContext::Threading::DISABLED);
  // torch-mlir's TMTensor ops (scatter, scan, sort) come in the generic form
  // as unregistered ops: the pipeline lowers them first, and its contract
  // check rejects any other unregistered op with a diagnostic.
  ctx.allowUnregisteredDialects();
  DiagnosticCollector diagnostics(ctx);

  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, ParserConfig(&ctx), "input");
  if (!module)
    diagnostics.fail("parsing the linalg input");

  auto impl = std::make_unique<Impl>();
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
  pipelineOptions.entry = options.entry;
  pipelineOptions.fusion = options.fusion;
  pipelineOptions.channelsLast = options.channelsLast;
  pipelineOptions.runtimeChecks = options.runtimeChecks;
  pipelineOptions.threads = options.threads
                                ? options.threads
                                : std::max(1u, std::thread::hardware_concurrency());
  // The JIT compiles for the host (detectHost below): AVX-512 has a vector
  // ldexp (vscalefps) for exp's 2^n.
  pipelineOptions.useLdexp = llvm::sys::getHostCPUFeatures().lookup("avx512f");
  PassManager tensorStage(&ctx);
  buildCpuTensorPipeline(tensorStage, pipelineOptions);
  if (failed(tensorStage.run(*module)))
    diagnostics.fail("the CPU pipeline (tensor stage)");
  if (auto kernels = (*module)->getAttrOfType<IntegerAttr>("lazymlir.kernels"))
    impl->numKernels = kernels.getInt();

  PassManager loweringStage(&ctx);
  buildCpuLoweringPipeline(loweringStage, pipelineOptions);
  if (failed(loweringStage.run(*module)))
    diagnostics.fail("the CPU pipeline (lowering stage)");

  // The check flag survives the lowering as an LLVM global of that name.
  bool hasChecks = SymbolTable::lookupSymbolIn(*module, kCheckFlagSymbol);

  if (options.keepLLVMDialect) {
    llvm::raw_string_ostream os(impl->llvmDialect);
    module->print(os);
  }

  auto tmBuilder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!tmBuilder)
    throw CompileError("lazymlir: cannot detect the host target: " +
                       llvm::toString(tmBuilder.takeError()));
  llvm::CodeGenOptLevel codeGenLevel = options.optLevel >= 3
                                            ? llvm::CodeGenOptLevel::Aggressive
                                            : llvm::CodeGenOptLevel::Default;
  tmBuilder->setCodeGenOptLevel(codeGenLevel);
  auto targetMachine = tmBuilder->createTargetMachine();
  if (!targetMachine)
    throw CompileError("lazymlir: cannot create the host target machine: " +
                       llvm::toString(targetMachine.takeError()));

  auto transformer = makeOptimizingTransformer(options.optLevel, /*sizeLevel=*/0,
                                               targetMachine->get());
  ExecutionEngineOptions engineOptions;
  engineOptions.transformer = transformer;
  engineOptions.jitCodeGenOptLevel = codeGenLevel;
  engineOptions.enableGDBNotificationListener = false;
  engineOptions.enablePerfNotificationListener = false;
  auto engine = ExecutionEngine::create(*module, engineOptions,
                                        std::move(*targetMachine));
  if (!engine) {
    std::string message = llvm::toString(engine.takeError());
    diagnostics.fail("JIT compilation (" + message + ")");
  }
  impl->engine = std::move(*engine);
  // Strided memref.copy (e.g. from padding) lowers to a call into MLIR's C
  // runner utilities, temporaries to our pool. The JIT searches only
  // globally visible symbols, and Python loads extensions privately, so hand
  // it the addresses.
  impl->engine->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    auto add = [&](const char *name, auto *function) {
      symbols[interner(name)] = {llvm::orc::ExecutorAddr::fromPtr(function),
                                 llvm::JITSymbolFlags::Exported};
    };
    add("memrefCopy", &memrefCopy);
    add("_mlir_memref_to_llvm_aligned_alloc", &lazymlirAlignedAlloc);
    add("_mlir_memref_to_llvm_alloc", &lazymlirAlloc);
    add("_mlir_memref_to_llvm_free", &lazymlirFree);
    // Parallel loops: the __kmpc_* ABI over the process's libgomp.
    for (const RuntimeSymbol &symbol : openMPEntryPoints())
      symbols[interner(symbol.name)] = {
          llvm::orc::ExecutorAddr::fromPtr(symbol.address),
          llvm::JITSymbolFlags::Exported};
    return symbols;
  });
  impl->engine->initialize();
  auto entry = impl->engine->lookupPacked(options.entry);
  if (!entry)
    throw CompileError("lazymlir: entry '" + options.entry +
                       "' missing after compilation: " +
                       llvm::toString(entry.takeError()));
  impl->entry = *entry;
  if (hasChecks) {
    auto flag = impl->engine->lookup(kCheckFlagSymbol);
    if (!flag)
      throw CompileError("lazymlir: check flag missing after compilation: " +
                         llvm::toString(flag.takeError()));
    // An i32 global, 4-byte aligned: accessed as an atomic int32_t.
    impl->checkFlag = static_cast<std::atomic<int32_t> *>(*flag);
  }
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

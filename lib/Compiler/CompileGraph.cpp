//===- CompileGraph.cpp - compile linalg into an executable ---------------===//
//
// CpuExecutable::compile and CpuExecutable::load, the compiler library's half
// of the executable (see KernelCompiler.h): the graph is parsed and taken
// through the tensor and bufferize stages, its outlined kernels are compiled
// in parallel (each distinct kernel once per process, through the runtime's
// TieredKernels) and its entry meanwhile; the runtime links the result.
//
//===----------------------------------------------------------------------===//

#include "CodeGen.h"
#include "Runtime/CacheEntries.h"
#include "Runtime/DiskCache.h"
#include "Runtime/Executable.h"
#include "lazymlir/Pipelines/Pipelines.h"
#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

using namespace mlir;

namespace lazymlir {

namespace {

std::optional<ElementType> toElementType(Type type) {
  if (type.isF16())
    return ElementType::F16;
  if (type.isBF16())
    return ElementType::BF16;
  if (type.isF32())
    return ElementType::F32;
  if (type.isF64())
    return ElementType::F64;
  if (type.isSignlessInteger(1))
    return ElementType::I1;
  if (type.isSignlessInteger(8))
    return ElementType::I8;
  if (type.isSignlessInteger(16))
    return ElementType::I16;
  if (type.isSignlessInteger(32))
    return ElementType::I32;
  if (type.isSignlessInteger(64))
    return ElementType::I64;
  return std::nullopt;
}

/// Appends the tensor types' signatures; stops at a type it cannot express.
void collectSignatures(TypeRange types, std::vector<TensorSignature> &out) {
  for (Type type : types) {
    auto tensorType = dyn_cast<RankedTensorType>(type);
    if (!tensorType)
      return;
    auto elementType = toElementType(tensorType.getElementType());
    if (!elementType)
      return;
    std::vector<int64_t> shape = tensorType.getShape().vec();
    for (int64_t &size : shape)
      if (ShapedType::isDynamic(size))
        size = kDynamicSize;
    out.push_back({*elementType, std::move(shape)});
  }
}

/// An outlined kernel as the text of a module of its own (the unit of
/// compilation and of caching).
struct Kernel {
  std::string name, text;
};

/// Takes the outlined kernels out of `module`; the entry keeps declarations.
std::vector<Kernel> extractKernels(ModuleOp module) {
  std::vector<Kernel> kernels;
  for (auto func : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
    if (!func->hasAttr(kOutlinedKernelAttr))
      continue;
    OwningOpRef<ModuleOp> holder = ModuleOp::create(func.getLoc());
    auto clone = cast<func::FuncOp>(func->clone());
    clone->removeAttr(kOutlinedKernelAttr);
    clone.setPublic();
    holder->push_back(clone);
    // The runtime functions it calls (lazymlir_sgemm_batched), declared in
    // its module too: the JIT binds them by name.
    llvm::StringSet<> declared;
    clone.walk([&](func::CallOp call) {
      auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
      if (callee && callee.isExternal() &&
          declared.insert(callee.getName()).second)
        holder->push_back(cast<func::FuncOp>(callee->clone()));
    });
    Kernel kernel{func.getName().str(), {}};
    llvm::raw_string_ostream os(kernel.text);
    holder->print(os);
    kernels.push_back(std::move(kernel));
    func->removeAttr(kOutlinedKernelAttr);
    func.eraseBody();
  }
  return kernels;
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void addTimes(CompileStats &stats, const ObjectTimes &times) {
  stats.llvmStage += times.llvmStage;
  stats.translate += times.translate;
  stats.optimize += times.optimize;
  stats.codegen += times.codegen;
  stats.llvmInstructions += times.instructions;
  stats.objectBytes += times.bytes;
}

} // namespace

std::unique_ptr<CpuExecutable>
CpuExecutable::load(const std::string &cacheKey,
                    const CompileOptions &options) {
  auto impl = std::make_unique<Impl>();
  if (!impl->loadFromDisk(cacheKey, options, compileKernel))
    return nullptr;
  return std::unique_ptr<CpuExecutable>(new CpuExecutable(std::move(impl)));
}

std::unique_ptr<CpuExecutable>
CpuExecutable::compile(const std::string &source,
                       const CompileOptions &options) {
  initializeLLVMOnce();
  auto start = Clock::now();
  const std::string &entry = options.pipeline.entry;
  // Kernels are the same code with or without the profiler: only the entry
  // (and so the graph's key) differs.
  std::string optionsKey = describeOptions(options);
  bool profile = options.pipeline.profile;
  std::string graphOptions = profile ? optionsKey + ";profile" : optionsKey;
  if (!options.donate.empty()) {
    graphOptions += ";donate=";
    for (int64_t index : options.donate)
      graphOptions += std::to_string(index) + ",";
  }
  std::string cacheKey = graphCacheKey(graphOptions, source);
  // A dump wants the LLVM dialect, a profile its call sites, which the disk
  // cache does not keep.
  bool diskGraphs = !options.keepLLVMDialect && !profile;
  if (diskGraphs)
    if (auto cached = load(cacheKey, options))
      return cached;

  auto impl = std::make_unique<Impl>();
  impl->cacheKey = cacheKey;
  CompileStats &stats = impl->stats;
  // One context per compile: graphs are independent, and nothing of the
  // context is needed once the JIT holds the machine code.
  MLIRContext ctx(dialectRegistry(), MLIRContext::Threading::DISABLED);
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
  if (auto func = module->lookupSymbol<func::FuncOp>(entry)) {
    // Donated arguments receive their results (lazymlir-donate-arguments):
    // those results are not outputs of the run.
    if (options.donate.size() % 2)
      throw CompileError("donate: an odd number of indices");
    std::vector<bool> donated(func.getNumResults(), false);
    Builder b(&ctx);
    for (size_t k = 0; k < options.donate.size(); k += 2) {
      int64_t arg = options.donate[k], result = options.donate[k + 1];
      if (arg < 0 || arg >= func.getNumArguments() || result < 0 ||
          result >= func.getNumResults() || donated[result])
        throw CompileError("donate: no such argument and result pair");
      func.setArgAttr(arg, "lazymlir.donated_to", b.getI64IntegerAttr(result));
      donated[result] = true;
    }
    collectSignatures(func.getArgumentTypes(), impl->inputs);
    SmallVector<Type> outputs;
    for (auto [index, type] : llvm::enumerate(func.getResultTypes()))
      if (!donated[index])
        outputs.push_back(type);
    collectSignatures(outputs, impl->outputs);
  }
  impl->buildArgumentBlock();

  CpuPipelineOptions pipelineOptions(hostPipelineSettings(options));
  phase = Clock::now();
  PassManager tensorStage(&ctx);
  buildCpuTensorPipeline(tensorStage, pipelineOptions);
  if (failed(tensorStage.run(*module)))
    diagnostics.fail("the CPU pipeline (tensor stage)");
  if (auto kernels = (*module)->getAttrOfType<IntegerAttr>(kKernelCountAttr))
    impl->kernelCount = kernels.getInt();
  stats.tensorStage = since(phase);

  phase = Clock::now();
  PassManager bufferizeStage(&ctx);
  buildCpuBufferizePipeline(bufferizeStage, pipelineOptions);
  if (failed(bufferizeStage.run(*module)))
    diagnostics.fail("the CPU pipeline (bufferize stage)");
  // Donated results left the signature (lazymlir-drop-donated-results): the
  // entry takes exactly the inputs and the other outputs.
  if (!options.donate.empty()) {
    auto func = module->lookupSymbol<func::FuncOp>(entry);
    if (!func ||
        func.getNumArguments() != impl->inputs.size() + impl->outputs.size())
      throw CompileError("donate: the compiled entry does not take the "
                         "inputs and the outputs that were not donated");
  }

  if (auto sites = (*module)->getAttrOfType<ArrayAttr>(kProfileSitesAttr)) {
    for (auto site : sites.getAsRange<DictionaryAttr>()) {
      ProfileSite &out = impl->profileSites.emplace_back();
      out.kernel = site.getAs<StringAttr>("kernel").str();
      out.ops = site.getAs<StringAttr>("ops").str();
      out.shapes = site.getAs<StringAttr>("shapes").str();
      out.bytes = site.getAs<IntegerAttr>("bytes").getInt();
      out.flops = site.getAs<IntegerAttr>("flops").getInt();
    }
  }
  std::vector<Kernel> kernels = extractKernels(*module);
  if (auto func = module->lookupSymbol<func::FuncOp>(entry))
    func.walk([&](func::CallOp) { ++stats.loopNests; });
  stats.distinctKernels = kernels.size();
  stats.bufferizeStage = since(phase);

  // The kernels on worker threads (each distinct kernel once per process);
  // the entry module meanwhile on this one.
  std::mutex statsMutex;
  std::string firstError;
  std::vector<std::string> fastKernels;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < kernels.size();) {
      const Kernel &kernel = kernels[i];
      ObjectTimes times;
      try {
        Acquired acquired = acquireKernel(kernel.name, &kernel.text, options,
                                          optionsKey, compileKernel, times);
        std::lock_guard<std::mutex> lock(statsMutex);
        ++(acquired.origin == KernelJit::Origin::Compiled
               ? stats.kernelsCompiled
           : acquired.origin == KernelJit::Origin::Disk ? stats.kernelsFromDisk
                                                        : stats.kernelsReused);
        if (acquired.tier == Tier::Fast)
          fastKernels.push_back(kernel.name);
      } catch (const std::exception &error) {
        std::lock_guard<std::mutex> lock(statsMutex);
        if (firstError.empty())
          firstError = error.what();
      } catch (...) { // nothing may leave a thread's function (std::terminate)
        std::lock_guard<std::mutex> lock(statsMutex);
        if (firstError.empty())
          firstError = "kernel " + kernel.name + ": an unknown exception";
      }
      std::lock_guard<std::mutex> lock(statsMutex);
      addTimes(stats, times);
    }
  };
  unsigned workers = std::min<size_t>(
      std::max(1u, std::thread::hardware_concurrency()), kernels.size());
  std::vector<std::thread> threads;
  auto joinAll = [&] {
    for (std::thread &thread : threads)
      if (thread.joinable())
        thread.join();
  };
  // A joinable std::thread destroyed while an exception unwinds is
  // std::terminate: a thread that cannot be started (std::system_error under
  // a process limit) leaves its kernels to the others, or to this thread.
  try {
    for (unsigned i = 0; i < workers; ++i)
      threads.emplace_back(work);
  } catch (const std::system_error &) {
    if (threads.empty())
      work();
  } catch (...) {
    joinAll();
    throw;
  }

  std::string entryObject;
  bool hasChecks = false;
  ObjectTimes entryTimes;
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
    entryTimes.llvmStage = since(phase);
    // The entry only allocates and calls kernels: one huge block of cold
    // code, compiled with no optimization (LLVM's code generator at -O2
    // took most of a transformer's compile time on it).
    std::vector<std::string> keep = {entry};
    if (hasChecks)
      keep.push_back(kCheckFlagSymbol);
    entryObject = emitObject(*module, keep, 0, Tier::Fast, entry, entryTimes);
  } catch (...) {
    joinAll();
    throw;
  }
  joinAll();
  if (!firstError.empty())
    throw CompileError(firstError);
  addTimes(stats, entryTimes);

  if (diskGraphs && DiskCache::get().enabled()) {
    GraphRecord record;
    record.inputs = impl->inputs;
    record.outputs = impl->outputs;
    record.kernelCount = impl->kernelCount;
    record.hasChecks = hasChecks;
    for (const Kernel &kernel : kernels)
      record.kernels.push_back(kernel.name);
    record.object = entryObject;
    DiskCache::get().write(cacheKey, record.serialize());
  }
  phase = Clock::now();
  impl->link(options, optionsKey, std::move(entryObject), hasChecks,
             std::move(fastKernels), compileKernel);
  stats.link = since(phase);
  stats.total = since(start);
  return std::unique_ptr<CpuExecutable>(new CpuExecutable(std::move(impl)));
}

} // namespace lazymlir

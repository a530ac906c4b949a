//===- CodeGen.cpp - MLIR modules to host object code ---------------------===//

#include "CodeGen.h"
#include "Runtime/KernelJit.h"
#include "lazymlir/Pipelines/Pipelines.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/DiagnosticHandler.h"
#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/Target/TargetMachine.h"

#include <algorithm>
#include <chrono>

using namespace mlir;

namespace lazymlir {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::unique_ptr<llvm::TargetMachine> hostTargetMachine(Tier tier) {
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    throw CompileError("lazymlir: cannot detect the host target: " +
                       llvm::toString(builder.takeError()));
  builder->setCodeGenOptLevel(tier == Tier::Full
                                  ? llvm::CodeGenOptLevel::Aggressive
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

/// A block per call: the entry of a large graph is one block of thousands
/// of kernel calls, and instruction selection, which works block by block,
/// takes time superlinear in a block's size (FastISel gives up on the
/// memref descriptors' aggregates, and SelectionDAG then gets the whole
/// block). Unoptimized code only: nothing merges the blocks again.
void splitAfterCalls(llvm::Module &module) {
  for (llvm::Function &function : module) {
    std::vector<llvm::Instruction *> cuts;
    for (llvm::BasicBlock &block : function)
      for (llvm::Instruction &inst : block)
        if (llvm::isa<llvm::CallInst>(inst) && !inst.isTerminator() &&
            inst.getNextNode() && !inst.getNextNode()->isTerminator())
          cuts.push_back(inst.getNextNode());
    for (llvm::Instruction *cut : cuts)
      cut->getParent()->splitBasicBlock(cut);
  }
}

} // namespace

const DialectRegistry &dialectRegistry() {
  static const DialectRegistry *registry = [] {
    auto *r = new DialectRegistry();
    registerAllDialects(*r);
    registerAllExtensions(*r);
    registerBuiltinDialectTranslation(*r);
    registerLLVMDialectTranslation(*r);
    registerOpenMPDialectTranslation(*r);
    // The GPU pipeline's gpu-module-to-binary translates kernel modules.
    registerGPUDialectTranslation(*r);
    registerNVVMDialectTranslation(*r);
    return r;
  }();
  return *registry;
}

DiagnosticCollector::DiagnosticCollector(MLIRContext &ctx)
    : handler(&ctx, [this](Diagnostic &diag) {
        llvm::raw_string_ostream os(text);
        os << diag.getLocation() << ": ";
        switch (diag.getSeverity()) {
        case DiagnosticSeverity::Error:
          os << "error: ";
          break;
        case DiagnosticSeverity::Warning:
          os << "warning: ";
          break;
        case DiagnosticSeverity::Note:
          os << "note: ";
          break;
        case DiagnosticSeverity::Remark:
          os << "remark: ";
          break;
        }
        os << diag << "\n";
        for (Diagnostic &note : diag.getNotes())
          os << note.getLocation() << ": note: " << note << "\n";
        return success();
      }) {}

void DiagnosticCollector::fail(const std::string &stage) const {
  std::string message = "lazymlir: " + stage + " failed";
  message += text.empty() ? std::string(" (no diagnostic)")
                          : std::string(":\n") + text;
  throw CompileError(message);
}

std::string emitObject(ModuleOp module, const std::vector<std::string> &keep,
                       unsigned irOptLevel, Tier tier,
                       const std::string &packedEntry, ObjectTimes &times) {
  auto start = Clock::now();
  llvm::LLVMContext llvmContext;
  // A loop lazymlir-lower-to-loops asked to vectorize that LLVM could not
  // (legality it can only judge here) stays scalar, which is correct: not a
  // warning on the user's terminal.
  struct QuietMissedTransforms : llvm::DiagnosticHandler {
    bool handleDiagnostics(const llvm::DiagnosticInfo &info) override {
      return info.getKind() == llvm::DK_OptimizationFailure;
    }
  };
  llvmContext.setDiagnosticHandler(std::make_unique<QuietMissedTransforms>());
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext);
  if (!llvmModule)
    throw CompileError("lazymlir: translation to LLVM IR failed");
  std::unique_ptr<llvm::TargetMachine> machine = hostTargetMachine(tier);
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
  if (irOptLevel == 0)
    splitAfterCalls(*llvmModule);
  for (llvm::GlobalValue &value : llvmModule->global_values())
    if (!value.isDeclaration() &&
        std::find(kept.begin(), kept.end(), value.getName()) == kept.end())
      value.setLinkage(llvm::GlobalValue::InternalLinkage);
  times.translate += since(start);

  start = Clock::now();
  auto optimize =
      makeOptimizingTransformer(irOptLevel, /*sizeLevel=*/0, machine.get());
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

std::string compileKernel(const std::string &text, const std::string &name,
                          const CompileOptions &options, Tier tier,
                          ObjectTimes &times) {
  initializeLLVMOnce();
  auto start = Clock::now();
  MLIRContext ctx(dialectRegistry(), MLIRContext::Threading::DISABLED);
  DiagnosticCollector diagnostics(ctx);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(text, ParserConfig(&ctx), name);
  if (!module)
    diagnostics.fail("parsing kernel " + name);
  CpuPipelineOptions pipeline(hostPipelineSettings(options));
  PassManager pm(&ctx);
  buildCpuLLVMPipeline(pm, pipeline);
  if (failed(pm.run(*module)))
    diagnostics.fail("the CPU pipeline (LLVM stage) on kernel " + name);
  times.llvmStage += since(start);
  return emitObject(*module, {name}, options.optLevel, tier, "", times);
}

} // namespace lazymlir

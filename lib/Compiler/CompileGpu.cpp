//===- CompileGpu.cpp - linalg-on-tensors to a GPU launch plan ------------===//

#include "lazymlir/Compiler/CompileGpu.h"

#include "CodeGen.h"
#include "lazymlir/Pipelines/Pipelines.h"
#include "lazymlir/Runtime/CpuExecutable.h"
#include "lazymlir/Transforms/Passes.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

using namespace mlir;

std::string lazymlir::compileGpuPlan(const std::string &source,
                                     const GpuCompileOptions &options) {
  MLIRContext ctx(dialectRegistry(), MLIRContext::Threading::DISABLED);
  // torch-mlir's TMTensor ops arrive in the generic form (unregistered);
  // lazymlir-lower-tm-tensor rewrites them, the contract check rejects any
  // other.
  ctx.allowUnregisteredDialects();
  DiagnosticCollector diagnostics(ctx);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, ParserConfig(&ctx), "graph");
  if (!module)
    diagnostics.fail("parsing the graph");
  GpuPipelineOptions pipeline;
  pipeline.chip = options.chip;
  pipeline.features = options.features;
  pipeline.libdevice = options.libdevice;
  pipeline.blockSize = options.blockSize;
  pipeline.fusion = options.fusion;
  PassManager pm(&ctx);
  buildGpuPipeline(pm, pipeline);
  if (failed(pm.run(*module)))
    diagnostics.fail("the GPU pipeline");
  auto plan = (*module)->getAttrOfType<StringAttr>(kLaunchPlanAttr);
  if (!plan)
    throw CompileError("lazymlir: the GPU pipeline left no launch plan");
  return plan.getValue().str();
}

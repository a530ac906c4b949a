//===- GpuPipeline.cpp - linalg-on-tensors to PTX for NVIDIA GPUs ---------===//
//
// Upstream's parallel-loop mapping, kernel outlining and NVVM lowering (the
// route checked in docs/gpu-notes.md); ours are fusion, the block shape
// (lazymlir-gpu-tile-parallel-loops) and the target check that keeps LLVM
// from aborting (lazymlir-verify-nvvm-targets).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Pipelines/Pipelines.h"
#include "lazymlir/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void lazymlir::buildGpuPipeline(OpPassManager &pm,
                                const GpuPipelineOptions &options) {
  // As on the CPU: TMTensor ops to loops (kernels of one thread for now),
  // the contract check, and checks that set a flag instead of aborting
  // (a kernel cannot abort the process either: `__assertfail` kills the
  // CUDA context). The flag's global is cloned into each gpu.module that
  // sets it: the runtime reads it from the module after a run.
  pm.addPass(createLowerTMTensorPass());
  pm.addPass(createVerifyBackendContractPass());
  pm.addPass(createGuardRuntimeChecksPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (options.fusion) {
    pm.addNestedPass<func::FuncOp>(createFuseElementwisePass());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
  }
  // Long reductions with few outputs (losses, sums of gradients) become
  // many parallel partial sums and a short final one.
  pm.addNestedPass<func::FuncOp>(createMergeLoopRunsPass());
  pm.addNestedPass<func::FuncOp>(createGpuSplitReductionsPass());
  pm.addPass(createCanonicalizerPass());

  // Destination passing, as on the CPU (DESIGN.md, decision 4).
  addBufferizeWithOutParams(pm);

  // One thread per output element; thread x on the innermost dimension.
  // Strided copies are kernels too (contiguous ones stay host-side copies);
  // work outside parallel loops (full reductions, scalars) becomes kernels
  // of one thread.
  pm.addNestedPass<func::FuncOp>(createStridedCopiesToLinalgPass());
  // A reduction carries its accumulator in a register (lower-to-loops),
  // not in global memory as convert-linalg-to-parallel-loops leaves it.
  LowerToLoopsPassOptions toLoops;
  toLoops.allParallel = true;
  pm.addNestedPass<func::FuncOp>(createLowerToLoopsPass(toLoops));
  pm.addNestedPass<func::FuncOp>(createGpuWrapHostWorkPass());
  GpuTileParallelLoopsPassOptions tiles;
  tiles.blockSize = options.blockSize;
  pm.addNestedPass<func::FuncOp>(createGpuTileParallelLoopsPass(tiles));
  GpuMapParallelLoopsPassOptions mapping;
  mapping.mappingPolicyStr = "innermost-first";
  pm.addNestedPass<func::FuncOp>(createGpuMapParallelLoopsPass(mapping));
  pm.addNestedPass<func::FuncOp>(createConvertParallelLoopToGpuPass());
  pm.addPass(createGpuLaunchSinkIndexComputationsPass());
  pm.addPass(createGpuKernelOutliningPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());

  // NVVM, then PTX. The PTX version is explicit: LLVM's default for the
  // chip may be one it rejects by aborting.
  GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = options.features;
  if (target.features.empty())
    target.features =
        "+ptx" + std::to_string(std::max(minimumPtxVersion(options.chip), 70));
  target.optLevel = 3;
  if (!options.libdevice.empty())
    target.linkLibs.push_back(options.libdevice);
  pm.addPass(createGpuNVVMAttachTarget(target));
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createLowerAffinePass());
  kernels.addPass(createSCFToControlFlowPass());
  ConvertGpuOpsToNVVMOpsOptions toNVVM;
  toNVVM.useBarePtrCallConv = true;
  kernels.addPass(createConvertGpuOpsToNVVMOps(toNVVM));
  // Math ops NVVM has no lowering for (math.absi: T5's relative position
  // buckets) become LLVM intrinsics.
  kernels.addPass(createConvertMathToLLVMPass());
  kernels.addPass(createCanonicalizerPass());
  kernels.addPass(createCSEPass());
  kernels.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createVerifyNvvmTargetsPass());
  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(binary));
  pm.addPass(createGpuLaunchPlanPass());
}

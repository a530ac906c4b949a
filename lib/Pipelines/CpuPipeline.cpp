//===- CpuPipeline.cpp - linalg-on-tensors to LLVM for the CPU ------------===//

#include "lazymlir/Pipelines/Pipelines.h"
#include "lazymlir/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/VectorToSCF/VectorToSCF.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void lazymlir::buildCpuTensorPipeline(OpPassManager &pm,
                                      const CpuPipelineOptions &options) {
  // torch-mlir's TMTensor ops (scatter, scan, sort) arrive as unregistered
  // ops; they become scf loops first, and the contract check rejects any
  // unregistered op left.
  pm.addPass(createLowerTMTensorPass());
  VerifyBackendContractPassOptions contract;
  contract.entry = options.entry;
  pm.addPass(createVerifyBackendContractPass(contract));
  // Before anything moves the accesses around: data-dependent indices and
  // integer divisors are made safe, failures recorded in a flag.
  if (options.runtimeChecks)
    pm.addPass(createGuardRuntimeChecksPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (options.channelsLast)
    pm.addNestedPass<func::FuncOp>(createChannelsLastPass());
  if (options.fusion) {
    // Both decide around the runtime GEMM below: transposes fused into the
    // contractions it computes, those kept out of row loops.
    FuseElementwisePassOptions elementwise;
    elementwise.runtimeGemms = true;
    pm.addNestedPass<func::FuncOp>(createFuseElementwisePass(elementwise));
    FuseRowReductionsPassOptions rows;
    rows.runtimeGemms = true;
    pm.addNestedPass<func::FuncOp>(createFuseRowReductionsPass(rows));
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
  }
  // Large float32 matrix products: the runtime's packed GEMM
  // (lazymlir-gemm-calls makes them calls once they are on buffers).
  MarkGemmsPassOptions marks;
  marks.bf16Operands = options.bf16Gemm;
  marks.bf16Results = options.bf16Gemm;
  pm.addNestedPass<func::FuncOp>(createMarkGemmsPass(marks));
  TileContractionsPassOptions tiling;
  tiling.fuseEpilogue = options.fusion;
  pm.addNestedPass<func::FuncOp>(createTileContractionsPass(tiling));
  pm.addNestedPass<func::FuncOp>(createMergeLoopRunsPass());
  pm.addNestedPass<func::FuncOp>(createVectorizeTransposesPass());
  pm.addNestedPass<func::FuncOp>(createVectorizeColumnReductionsPass());
  ApproximateMathPassOptions approximate;
  approximate.useLdexp = options.useLdexp;
  pm.addNestedPass<func::FuncOp>(createApproximateMathPass(approximate));
  pm.addNestedPass<func::FuncOp>(createReassociateReductionsPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  CountKernelsPassOptions count;
  count.entry = options.entry;
  pm.addPass(createCountKernelsPass(count));
}

void lazymlir::addBufferizeWithOutParams(OpPassManager &pm,
                                         const std::string &entry,
                                         bool markResults) {
  // Identity layouts at the function boundary: the runtime passes contiguous
  // torch buffers, and static strides let LLVM vectorize the loops.
  // Each destination of a zero fill CSE shared fills its own buffer, rather
  // than receiving a copy of one filled buffer.
  pm.addNestedPass<func::FuncOp>(createPrivateFillsPass());
  // A result returned through a reshape is computed in its out-parameter,
  // not copied into it.
  pm.addNestedPass<func::FuncOp>(createReshapedResultsPass());
  // Results written into the arguments the caller donated (a step's new
  // parameters and moments into the old ones' buffers): before one-shot
  // bufferization ties them, after it they leave the signature.
  if (!entry.empty()) {
    DonateArgumentsPassOptions donate;
    donate.entry = entry;
    pm.addPass(createDonateArgumentsPass(donate));
  }
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  if (!entry.empty()) {
    DropDonatedResultsPassOptions drop;
    drop.entry = entry;
    pm.addPass(createDropDonatedResultsPass(drop));
  }
  // Tile loops yield their output buffer unchanged: folding their results
  // to that buffer lets the next pass write results in place instead of
  // copying a finished temporary into the out-parameter.
  pm.addPass(createCanonicalizerPass());

  // Destination passing (DESIGN.md, decision 4): torch allocates the outputs
  // and the kernels write into them directly instead of into a temporary
  // that would then be copied.
  bufferization::BufferResultsToOutParamsPassOptions outParams;
  outParams.hoistStaticAllocs = true;
  // A result with `?` dimensions too: its out-parameter (allocated by the
  // caller at the run's sizes) replaces the allocation, instead of a copy
  // of a finished temporary into it.
  outParams.hoistDynamicAllocs = true;
  outParams.modifyPublicFunctions = true;
  // `bufferize.result` on each out-parameter, for
  // lazymlir-outputs-at-first-write.
  outParams.addResultAttribute = markResults;
  pm.addPass(bufferization::createBufferResultsToOutParamsPass(outParams));
  pm.addPass(createCanonicalizerPass());
}

void lazymlir::buildCpuBufferizePipeline(OpPassManager &pm,
                                         const CpuPipelineOptions &options) {
  pm.addNestedPass<func::FuncOp>(createDistinctResultsPass());
  // The caller's tensors are never updated in place.
  ReadonlyArgumentsPassOptions readonly;
  readonly.entry = options.entry;
  pm.addPass(createReadonlyArgumentsPass(readonly));
  // After the last CSE: parallel tile loops get per-iteration scratch.
  pm.addNestedPass<func::FuncOp>(createPrivatizeTileScratchPass());

  addBufferizeWithOutParams(pm, options.entry, /*markResults=*/true);
  // A failed runtime check leaves the donated arguments as they were (the
  // runtime reruns the graph eagerly from them).
  GuardDonatedWritesPassOptions guardDonated;
  guardDonated.entry = options.entry;
  pm.addPass(createGuardDonatedWritesPass(guardDonated));
  GemmCallsPassOptions gemms;
  gemms.threads = options.threads;
  pm.addPass(createGemmCallsPass(gemms));
  pm.addNestedPass<func::FuncOp>(createHoistRedundantTransfersPass());
  // Per-tile temporaries (accumulators) are allocated once, outside the tile
  // loops, and on the stack when small: no malloc per tile.
  pm.addNestedPass<func::FuncOp>(bufferization::createBufferLoopHoistingPass());
  bufferization::PromoteBuffersToStackPassOptions toStack;
  toStack.maxAllocSizeInBytes = 16384;
  toStack.maxRankOfAllocatedMemRef = 4;
  pm.addNestedPass<func::FuncOp>(
      bufferization::createPromoteBuffersToStackPass(toStack));
  bufferization::buildBufferDeallocationPipeline(pm);
  // Each temporary freed after its last use, not at the end of its block:
  // the pool reuses it for what the step allocates next.
  pm.addNestedPass<func::FuncOp>(createEarlyDeallocsPass());

  // Copies between strided layouts become linalg.copy, lowered like the
  // other linalg ops instead of by MLIR's element-by-element runtime copy.
  pm.addNestedPass<func::FuncOp>(createStridedCopiesToLinalgPass());
  // The outer loops of large kernels and of large contractions' tile nests
  // become scf.parallel (parallelize-tiles gives each iteration its own
  // copy of the temporaries hoisted out of the nest, and keeps sequential a
  // nest that allocates inside), and each of those one
  // OpenMP parallel loop with a guided schedule: the body is outlined once
  // (LLVM's OpenMPIRBuilder) and runs on the process's libgomp threads
  // through the runtime's __kmpc_* entry points (lib/Runtime/OpenMP.cpp).
  // Large elementwise outputs are written with non-temporal vector stores
  // first: streaming-stores reads the tile loops' marks, which
  // parallelize-tiles removes.
  int64_t parallelThreshold =
      options.threads > 1 ? int64_t(options.parallelThreshold) : 0;
  StreamingStoresPassOptions streaming;
  streaming.minBytes = options.streamingStoreBytes;
  streaming.parallelThreshold = parallelThreshold;
  pm.addNestedPass<func::FuncOp>(createStreamingStoresPass(streaming));
  LowerToLoopsPassOptions toLoops;
  toLoops.parallelThreshold = parallelThreshold;
  toLoops.vectorWidth = options.vectorWidth;
  pm.addNestedPass<func::FuncOp>(createLowerToLoopsPass(toLoops));
  // Softmax and layer norm run tile by tile of rows: the normalizing pass
  // fetches the next tile while it computes (before parallelize-tiles, which
  // keeps the tile loop's body).
  pm.addNestedPass<func::FuncOp>(createPrefetchRowTilesPass());
  ParallelizeTilesPassOptions tiles;
  tiles.parallelThreshold = parallelThreshold;
  pm.addNestedPass<func::FuncOp>(createParallelizeTilesPass(tiles));
  // Each loop nest becomes a function named by its content: the runtime
  // lowers and compiles each distinct kernel once, in parallel.
  OutlineKernelsPassOptions outline;
  outline.entry = options.entry;
  pm.addPass(createOutlineKernelsPass(outline));
  // Each output gets its pages right before its first write, from the
  // pool's idle blocks (the temporaries freed before it), not before the
  // run: a step's gradients are not held through its forward.
  OutputsAtFirstWritePassOptions outputs;
  outputs.entry = options.entry;
  pm.addPass(createOutputsAtFirstWritePass(outputs));
  if (options.profile) {
    InstrumentKernelsPassOptions instrument;
    instrument.entry = options.entry;
    pm.addPass(createInstrumentKernelsPass(instrument));
  }
}

void lazymlir::buildCpuLLVMPipeline(OpPassManager &pm,
                                    const CpuPipelineOptions &options) {
  if (options.threads > 1) {
    ConvertSCFToOpenMPPassOptions toOpenMP;
    toOpenMP.numThreads = options.threads;
    pm.addPass(createConvertSCFToOpenMPPass(toOpenMP));
    // A tile's scratch once per thread, not per tile (the runtime's pool).
    pm.addNestedPass<func::FuncOp>(createPerThreadScratchPass());
    pm.addNestedPass<func::FuncOp>(createScheduleWorksharingPass());
    // It wraps each iteration in a memref.alloca_scope, which must stay one
    // block; loop bodies of linalg ops allocate nothing, so canonicalization
    // inlines the scopes before scf-to-cf splits the inner loops into blocks.
    pm.addPass(createCanonicalizerPass());
  }
  pm.addNestedPass<func::FuncOp>(createConvertVectorToSCFPass(
      VectorTransferToSCFOptions().enableFullUnroll()));
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  // expand-strided-metadata crashes on an expand_shape into several `?`
  // sizes (a dynamic graph's view of batch x sequence rows as [batch,
  // sequence, ...]): those become reinterpret_casts first.
  pm.addPass(createDynamicExpandShapesPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  // bf16 roundings as integer arithmetic, not LLVM's call per element on
  // hosts without a bf16 conversion instruction.
  pm.addPass(createExpandBf16ConversionsPass());
  // Math ops with an LLVM intrinsic become intrinsics (vectorizable); the
  // rest (erf, tanh, atan2, ...) become libm calls.
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  // Contractions become outer products: broadcast-FMA chains on registers.
  ConvertVectorToLLVMPassOptions vectorToLLVM;
  vectorToLLVM.vectorContractLowering =
      vector::VectorContractLowering::OuterProduct;
  // lazymlir-vectorize-transposes' 16x16 blocks: shuffles (others stay
  // element by element).
  vectorToLLVM.vectorTransposeLowering =
      vector::VectorTransposeLowering::Shuffle16x16;
  pm.addPass(createConvertVectorToLLVMPass(vectorToLLVM));
  // Temporaries are allocated through _mlir_memref_to_llvm_{aligned_alloc,
  // free}, which the runtime serves from a pool: with malloc, every large
  // temporary was a fresh mmap, page-faulted in on every run (a fifth of a
  // training step).
  FinalizeMemRefToLLVMConversionPassOptions memrefToLLVM;
  memrefToLLVM.useAlignedAlloc = true;
  memrefToLLVM.useGenericFunctions = true;
  pm.addPass(createFinalizeMemRefToLLVMConversionPass(memrefToLLVM));
  pm.addPass(createConvertToLLVMPass());
  if (options.threads > 1)
    pm.addPass(createConvertOpenMPToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  // Booleans as bytes: LLVM vectorizes loops over byte loads, not over i1's.
  pm.addPass(createByteBoolAccessesPass());
  pm.addPass(createNoaliasAllocationsPass());
  pm.addPass(createCanonicalizerPass());
}

void lazymlir::buildCpuLoweringPipeline(OpPassManager &pm,
                                        const CpuPipelineOptions &options) {
  buildCpuBufferizePipeline(pm, options);
  buildCpuLLVMPipeline(pm, options);
}

void lazymlir::buildCpuPipeline(OpPassManager &pm,
                                const CpuPipelineOptions &options) {
  buildCpuTensorPipeline(pm, options);
  buildCpuLoweringPipeline(pm, options);
}

void lazymlir::registerAllPassesAndPipelines() {
  registerLazyMLIRTransformsPasses();
  PassPipelineRegistration<CpuPipelineOptions>(
      "lazymlir-cpu-pipeline",
      "Lower linalg-on-tensors to the LLVM dialect for the CPU, results as "
      "out-parameters",
      buildCpuPipeline);
  PassPipelineRegistration<GpuPipelineOptions>(
      "lazymlir-gpu-pipeline",
      "Lower linalg-on-tensors to PTX kernels for NVIDIA GPUs (gpu.binary) "
      "and a host function that launches them",
      buildGpuPipeline);
}

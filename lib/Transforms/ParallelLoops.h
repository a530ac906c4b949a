//===- ParallelLoops.h - loop nests as scf.parallel -------------*- C++ -*-===//
//
// Shared by lazymlir-lower-to-loops, lazymlir-streaming-stores and
// lazymlir-parallelize-tiles: how many outer loops of a nest run in parallel,
// and the rewrite of those loops into one scf.parallel.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_LIB_TRANSFORMS_PARALLELLOOPS_H
#define LAZYMLIR_LIB_TRANSFORMS_PARALLELLOOPS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"

namespace lazymlir {

/// Iterations of the parallel loop wanted at least: a few per thread, so
/// that a static schedule balances.
inline constexpr int64_t kMinParallelIterations = 64;

/// How many of the leading loops with these trip counts (loops allowed to
/// run in parallel) to run as one parallel loop: the fewest whose iterations
/// number kMinParallelIterations, else all of them if that makes at least
/// two iterations. 0: none.
unsigned leadingParallelDepth(llvm::ArrayRef<int64_t> trips);

/// Whether `op` has at least `parallelThreshold` iteration points counting
/// its static loop ranges only (dynamic ones as 1); never when the threshold
/// is 0 or less.
bool isLargeKernel(mlir::linalg::LinalgOp op, int64_t parallelThreshold);

/// How many outer loops of `op`'s nest to run as one parallel loop: among
/// the leading loops writing disjointly, never the innermost of several
/// loops (it is the one LLVM vectorizes). 0: none.
unsigned kernelParallelDepth(mlir::linalg::LinalgOp op);

/// The number of leading loops of `op` that are parallel and index every
/// output (their iterations write disjoint elements), whatever their sizes:
/// on a GPU each of their iterations is a thread.
unsigned disjointParallelDepth(mlir::linalg::LinalgOp op);

/// Replaces the outer `depth` loops of a perfect scf.for nest by one
/// scf.parallel over the same iteration space.
mlir::scf::ParallelOp
parallelizeLoopNest(mlir::RewriterBase &rewriter,
                    llvm::ArrayRef<mlir::Operation *> loops, unsigned depth);

/// Splits the innermost loop of the scf.for nest `loops` (a constant step,
/// no iter_args, more than `iterations` trips) into blocks of `iterations`
/// iterations: a loop over the blocks, the original loop inside it over
/// [block, min(block + step x iterations, upper)). loops.back() becomes the
/// block loop. Before parallelizeLoopNest makes the innermost loop itself
/// the OpenMP loop: with the guided schedule that loop reloads its upper
/// bound from the runtime after every iteration, so LLVM neither vectorizes
/// nor unrolls it (a loop of one 64-byte store per iteration wrote 30 GB/s
/// where eager's in-place add wrote 46); each block is a countable loop.
void stripMineInnermost(mlir::RewriterBase &rewriter,
                        llvm::SmallVectorImpl<mlir::Operation *> &loops,
                        int64_t iterations);

} // namespace lazymlir

#endif // LAZYMLIR_LIB_TRANSFORMS_PARALLELLOOPS_H

//===- IterationRuns.h - loops a contraction can merge ----------*- C++ -*-===//
//
// Shared by lazymlir-tile-contractions (which merges the runs) and
// lazymlir-fuse-elementwise (which fuses nothing into a contraction that
// would keep it from merging them).
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_LIB_TRANSFORMS_ITERATIONRUNS_H
#define LAZYMLIR_LIB_TRANSFORMS_ITERATIONRUNS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace lazymlir {

/// The runs of two or more adjacent loops of one kind that every map reads
/// either not at all or as one contiguous run in loop order, so that they
/// can be merged into one loop; runs of parallel loops only when
/// `parallelRuns`. None unless every result of every map is a plain
/// dimension.
llvm::SmallVector<mlir::ReassociationIndices>
mergeableIterationRuns(llvm::ArrayRef<mlir::AffineMap> maps,
                       llvm::ArrayRef<mlir::utils::IteratorType> iterators,
                       bool parallelRuns);

/// Drops from `runs` each run of two or more dynamic (`?`) loops of `ranges`
/// (the op's static loop ranges): merged, its result would be expanded back
/// into several `?` sizes, which expand-strided-metadata cannot lower (it
/// crashed on memref.expand_shape of memref<?xf32> into memref<?x?xf32>).
void dropRunsOfDynamicLoops(
    llvm::SmallVectorImpl<mlir::ReassociationIndices> &runs,
    llvm::ArrayRef<int64_t> ranges);

} // namespace lazymlir

#endif // LAZYMLIR_LIB_TRANSFORMS_ITERATIONRUNS_H

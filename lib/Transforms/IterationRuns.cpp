//===- IterationRuns.cpp - loops a contraction can merge ------------------===//

#include "IterationRuns.h"

using namespace mlir;

namespace lazymlir {

SmallVector<ReassociationIndices>
mergeableIterationRuns(ArrayRef<AffineMap> maps,
                       ArrayRef<utils::IteratorType> iterators,
                       bool parallelRuns) {
  // Only maps of plain dimensions: collapseOpIterationDims reads out of
  // bounds on a constant result (a broadcast (c, 0, 0) made it build an
  // invalid op, or crash), and an expression (a convolution's window,
  // im2col's gather) cannot be merged.
  for (AffineMap map : maps)
    if (!llvm::all_of(map.getResults(), llvm::IsaPred<AffineDimExpr>))
      return {};
  // Loops `d` and `d + 1` merge when they are of one kind and every map
  // reads either neither or both, `d + 1` right after `d`.
  auto adjacent = [&](unsigned d) {
    if (iterators[d] != iterators[d + 1])
      return false;
    for (AffineMap map : maps) {
      std::optional<unsigned> first =
          map.getResultPosition(getAffineDimExpr(d, map.getContext()));
      std::optional<unsigned> second =
          map.getResultPosition(getAffineDimExpr(d + 1, map.getContext()));
      if (first.has_value() != second.has_value() ||
          (first && *second != *first + 1))
        return false;
    }
    return true;
  };
  SmallVector<ReassociationIndices> runs;
  for (unsigned loop = 0; loop < iterators.size();) {
    unsigned end = loop;
    while (end + 1 < iterators.size() && adjacent(end))
      ++end;
    bool wanted =
        parallelRuns || iterators[loop] == utils::IteratorType::reduction;
    if (end > loop && wanted)
      runs.push_back(llvm::to_vector(llvm::seq<int64_t>(loop, end + 1)));
    loop = end + 1;
  }
  return runs;
}

} // namespace lazymlir

void lazymlir::dropRunsOfDynamicLoops(
    llvm::SmallVectorImpl<mlir::ReassociationIndices> &runs,
    llvm::ArrayRef<int64_t> ranges) {
  llvm::erase_if(runs, [&](const mlir::ReassociationIndices &run) {
    return llvm::count_if(run, [&](int64_t loop) {
             return mlir::ShapedType::isDynamic(ranges[loop]);
           }) > 1;
  });
}

//===- Destinations.h - the tensor an op writes a result into ---*- C++ -*-===//
//
// Shared by lazymlir-private-fills (which clones a shared fill for each op
// that writes into it) and lazymlir-reshaped-results (which follows a
// result down to the empty tensor it is written into).
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_LIB_TRANSFORMS_DESTINATIONS_H
#define LAZYMLIR_LIB_TRANSFORMS_DESTINATIONS_H

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"

namespace lazymlir {

/// The operand `result` is written into, when its op writes in place: the
/// tied init of a destination-style op, the initial value of an scf.for or
/// scf.forall (tile loops yield their output tensor).
inline mlir::OpOperand *destinationOf(mlir::OpResult result) {
  mlir::Operation *op = result.getOwner();
  unsigned index = result.getResultNumber();
  if (auto dps = llvm::dyn_cast<mlir::DestinationStyleOpInterface>(op))
    return dps.getTiedOpOperand(result);
  if (auto loop = llvm::dyn_cast<mlir::scf::ForOp>(op))
    return &loop.getInitArgsMutable()[index];
  if (auto forall = llvm::dyn_cast<mlir::scf::ForallOp>(op))
    return &forall.getOutputsMutable()[index];
  return nullptr;
}

/// Whether `use` is what one of its owner's results is written into.
inline bool isDestination(mlir::OpOperand &use) {
  return llvm::any_of(use.getOwner()->getResults(), [&](mlir::OpResult r) {
    return destinationOf(r) == &use;
  });
}

} // namespace lazymlir

#endif // LAZYMLIR_LIB_TRANSFORMS_DESTINATIONS_H

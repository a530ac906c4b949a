//===- ParallelizeTiles.cpp - marked tile loops as parallel loops ---------===//

#include "lazymlir/Transforms/ParallelTiling.h"
#include "lazymlir/Transforms/Passes.h"

#include "ParallelLoops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallVectorExtras.h"

namespace lazymlir {
#define GEN_PASS_DEF_PARALLELIZETILESPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct ParallelizeTilesPass
    : lazymlir::impl::ParallelizeTilesPassBase<ParallelizeTilesPass> {
  using Base::Base;

  /// The loops of a tile nest (outer to inner) that may run as one parallel
  /// loop: marked, without loop-carried values, each the only effectful op
  /// of its parent's body. Empty when the nest allocates inside. Scratch
  /// used only by the nest (per-tile temporaries that buffer-loop-hoisting
  /// moved out of the tile loops, of static or dynamic size) is returned in
  /// `scratch`: the caller allocates it in the parallel body instead, so
  /// that each iteration has its own.
  static SmallVector<Operation *>
  parallelTileNest(scf::ForOp root, SmallVectorImpl<Operation *> &scratch) {
    SmallVector<Operation *> nest;
    for (scf::ForOp loop = root; loop;) {
      if (!loop->hasAttr(lazymlir::kParallelTilesAttr) ||
          loop.getNumRegionIterArgs() != 0)
        break;
      nest.push_back(loop);
      scf::ForOp inner;
      for (Operation &op : loop.getBody()->without_terminator()) {
        if (auto forOp = dyn_cast<scf::ForOp>(op); forOp && !inner)
          inner = forOp;
        else if (!isMemoryEffectFree(&op) || inner)
          inner = nullptr, loop = nullptr; // effects besides the inner loop
      }
      if (!loop)
        break;
      loop = inner;
    }
    bool refused = false;
    llvm::SetVector<Operation *> sunk;
    root.walk([&](Operation *op) {
      refused |= isa<memref::AllocOp, memref::AllocaOp>(op);
      for (Value operand : op->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!isa_and_nonnull<memref::AllocOp, memref::AllocaOp>(def) ||
            root->isAncestor(def))
          continue;
        bool onlyHere = llvm::all_of(operand.getUsers(), [&](Operation *u) {
          return isa<memref::DeallocOp>(u) || root->isAncestor(u);
        });
        auto type = cast<MemRefType>(operand.getType());
        (void)type;
        // Scratch of dynamic (`?`) size too (a row tile's temporaries when
        // the row length is dynamic): its sizes are defined before the
        // nest, so each iteration can allocate its own.
        if (onlyHere)
          sunk.insert(def);
      }
    });
    if (refused)
      nest.clear();
    else
      scratch.append(sunk.begin(), sunk.end());
    return nest;
  }

  /// How many outer loops of `nest` to run as one parallel loop (a loop
  /// without static bounds counts as enough iterations).
  static unsigned tileParallelDepth(ArrayRef<Operation *> nest) {
    SmallVector<int64_t> trips = llvm::map_to_vector(nest, [](Operation *op) {
      std::optional<APInt> trips = cast<scf::ForOp>(op).getStaticTripCount();
      return trips ? trips->getSExtValue() : lazymlir::kMinParallelIterations;
    });
    return lazymlir::leadingParallelDepth(trips);
  }

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<scf::ForOp> roots;
    getOperation().walk([&](scf::ForOp loop) {
      auto points =
          loop->getAttrOfType<IntegerAttr>(lazymlir::kParallelTilesAttr);
      auto parent = loop->getParentOfType<scf::ForOp>();
      if (points && points.getInt() >= parallelThreshold &&
          parallelThreshold > 0 &&
          !(parent && parent->hasAttr(lazymlir::kParallelTilesAttr)))
        roots.push_back(loop);
    });
    for (scf::ForOp root : roots) {
      SmallVector<Operation *> scratch;
      SmallVector<Operation *> nest = parallelTileNest(root, scratch);
      unsigned depth = tileParallelDepth(nest);
      if (!depth)
        continue;
      scf::ParallelOp parallel =
          lazymlir::parallelizeLoopNest(rewriter, nest, depth);
      // Each iteration allocates its own scratch: on the heap (the runtime's
      // pool), as an alloca would keep convert-scf-to-openmp's per-iteration
      // alloca scope, which must then stay one block. After that conversion
      // lazymlir-per-thread-scratch allocates it once per thread instead.
      for (Operation *shared : scratch) {
        Value buffer = shared->getResult(0);
        for (Operation *user : llvm::make_early_inc_range(buffer.getUsers()))
          if (isa<memref::DeallocOp>(user))
            rewriter.eraseOp(user);
        rewriter.setInsertionPointToStart(parallel.getBody());
        auto alignment = shared->getAttrOfType<IntegerAttr>("alignment");
        ValueRange sizes, symbols;
        if (auto heap = dyn_cast<memref::AllocOp>(shared)) {
          sizes = heap.getDynamicSizes();
          symbols = heap.getSymbolOperands();
        } else if (auto stack = dyn_cast<memref::AllocaOp>(shared)) {
          sizes = stack.getDynamicSizes();
          symbols = stack.getSymbolOperands();
        }
        auto alloc = memref::AllocOp::create(rewriter, shared->getLoc(),
                                             cast<MemRefType>(buffer.getType()),
                                             sizes, symbols, alignment);
        rewriter.setInsertionPoint(parallel.getBody()->getTerminator());
        memref::DeallocOp::create(rewriter, shared->getLoc(), alloc);
        rewriter.replaceOp(shared, alloc);
      }
    }
    getOperation().walk([](scf::ForOp loop) {
      loop->removeAttr(lazymlir::kParallelTilesAttr);
    });
  }
};

} // namespace

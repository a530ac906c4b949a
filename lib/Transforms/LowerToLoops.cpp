//===- LowerToLoops.cpp - loops, parallel where it pays -------------------===//

#include "lazymlir/Transforms/Passes.h"
#include "lazymlir/Transforms/ParallelTiling.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/PatternMatch.h"

namespace lazymlir {
#define GEN_PASS_DEF_LOWERTOLOOPSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// Iterations of the parallel loop wanted at least: a few per thread, so
/// that a static schedule balances.
constexpr int64_t kMinParallelIterations = 64;

/// Bytes per streaming (non-temporal) store: one cache line, one AVX-512
/// register; also the alignment those stores need.
constexpr int64_t kStreamBytes = 64;

/// Whether iterations of loop `dim` write disjoint output elements: the dim
/// is parallel and indexes every output directly.
bool writesDisjointly(linalg::LinalgOp op, unsigned dim) {
  if (op.getIteratorTypesArray()[dim] != utils::IteratorType::parallel)
    return false;
  for (OpOperand &init : op.getDpsInitsMutable()) {
    AffineMap map = op.getMatchingIndexingMap(&init);
    if (!llvm::any_of(map.getResults(), [&](AffineExpr e) {
          return e == getAffineDimExpr(dim, op.getContext());
        }))
      return false;
  }
  return true;
}

/// How many of the leading loops with these trip counts (loops allowed to
/// run in parallel) to run as one parallel loop: the fewest whose iterations
/// number kMinParallelIterations, else all of them if that makes at least
/// two iterations. 0: none.
unsigned leadingParallelDepth(ArrayRef<int64_t> trips) {
  int64_t iterations = 1;
  for (auto [depth, trip] : llvm::enumerate(trips)) {
    iterations *= trip;
    if (iterations >= kMinParallelIterations)
      return depth + 1;
  }
  return iterations >= 2 ? trips.size() : 0;
}

struct LowerToLoopsPass
    : lazymlir::impl::LowerToLoopsPassBase<LowerToLoopsPass> {
  using Base::Base;

  bool isLarge(linalg::LinalgOp op) const {
    if (parallelThreshold <= 0 || op.hasDynamicShape())
      return false;
    int64_t points = 1;
    for (int64_t bound : op.getStaticLoopRanges())
      points *= bound;
    return points >= parallelThreshold;
  }

  /// How many outer loops of `op`'s nest to run as one parallel loop: among
  /// the leading loops writing disjointly, never the innermost of several
  /// loops (it is the one LLVM vectorizes). 0: none.
  unsigned parallelDepth(linalg::LinalgOp op) const {
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    unsigned limit = ranges.size() == 1 ? 1 : ranges.size() - 1;
    unsigned allowed = 0;
    while (allowed < limit && writesDisjointly(op, allowed))
      ++allowed;
    return leadingParallelDepth(ArrayRef(ranges).take_front(allowed));
  }

  /// Replaces the outer `depth` loops of a perfect scf.for nest by one
  /// scf.parallel over the same iteration space.
  static scf::ParallelOp parallelize(IRRewriter &rewriter,
                                     ArrayRef<Operation *> loops,
                                     unsigned depth) {
    SmallVector<Value> lbs, ubs, steps;
    for (Operation *loop : loops.take_front(depth)) {
      auto forOp = cast<scf::ForOp>(loop);
      lbs.push_back(forOp.getLowerBound());
      ubs.push_back(forOp.getUpperBound());
      steps.push_back(forOp.getStep());
    }
    auto outer = cast<scf::ForOp>(loops.front());
    rewriter.setInsertionPoint(outer);
    auto parallel =
        scf::ParallelOp::create(rewriter, outer.getLoc(), lbs, ubs, steps);
    // Each level's ops (index computations, inner bounds) go into the
    // parallel body in order, the innermost level's whole body last.
    Operation *insertPoint = parallel.getBody()->getTerminator();
    for (unsigned level = 0; level < depth; ++level) {
      auto forOp = cast<scf::ForOp>(loops[level]);
      rewriter.replaceAllUsesWith(forOp.getInductionVar(),
                                  parallel.getInductionVars()[level]);
      for (Operation &op : llvm::make_early_inc_range(*forOp.getBody())) {
        if (&op == forOp.getBody()->getTerminator() ||
            (level + 1 < depth && &op == loops[level + 1]))
          continue;
        rewriter.moveOpBefore(&op, insertPoint);
      }
    }
    rewriter.eraseOp(outer);
    return parallel;
  }

  /// The loops of a tile nest (outer to inner) that may run as one parallel
  /// loop: marked, without loop-carried values, each the only effectful op
  /// of its parent's body. Empty when the nest allocates inside, or uses a
  /// dynamically sized buffer allocated outside for its use only. Statically
  /// sized scratch used only by the nest (per-tile temporaries that
  /// buffer-loop-hoisting moved out of the tile loops) is returned in
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
        if (onlyHere && type.hasStaticShape() && def->getNumOperands() == 0)
          sunk.insert(def);
        else if (onlyHere)
          refused = true;
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
      return trips ? trips->getSExtValue() : kMinParallelIterations;
    });
    return leadingParallelDepth(trips);
  }

  void parallelizeTiles(IRRewriter &rewriter) {
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
      scf::ParallelOp parallel = parallelize(rewriter, nest, depth);
      // Each iteration allocates its own scratch: on the heap (the runtime's
      // pool), as an alloca would keep convert-scf-to-openmp's per-iteration
      // alloca scope, which must then stay one block.
      for (Operation *shared : scratch) {
        Value buffer = shared->getResult(0);
        for (Operation *user : llvm::make_early_inc_range(buffer.getUsers()))
          if (isa<memref::DeallocOp>(user))
            rewriter.eraseOp(user);
        rewriter.setInsertionPointToStart(parallel.getBody());
        auto alignment = shared->getAttrOfType<IntegerAttr>("alignment");
        auto alloc = memref::AllocOp::create(
            rewriter, shared->getLoc(), cast<MemRefType>(buffer.getType()),
            alignment);
        rewriter.setInsertionPoint(parallel.getBody()->getTerminator());
        memref::DeallocOp::create(rewriter, shared->getLoc(), alloc);
        rewriter.replaceOp(shared, alloc);
      }
    }
    getOperation().walk([](scf::ForOp loop) {
      loop->removeAttr(lazymlir::kParallelTilesAttr);
    });
  }

  /// The bytes written through `op`'s output when it streams: the output
  /// itself, or, for an op in a tile loop (marked lazymlir.parallel_tiles)
  /// writing a subview, the whole buffer its tiles fill (a softmax's
  /// normalized rows). 0 otherwise.
  static int64_t streamedBytes(linalg::LinalgOp op, MemRefType outType) {
    int64_t elementBytes = outType.getElementTypeBitWidth() / 8;
    if (outType.getLayout().isIdentity())
      return outType.getNumElements() * elementBytes;
    auto subview =
        op.getDpsInitOperand(0)->get().getDefiningOp<memref::SubViewOp>();
    auto tile = op->getParentOfType<scf::ForOp>();
    if (!subview || !tile || !tile->hasAttr(lazymlir::kParallelTilesAttr))
      return 0;
    MemRefType sourceType = subview.getSourceType();
    if (!sourceType.hasStaticShape() || !sourceType.getLayout().isIdentity())
      return 0;
    return sourceType.getNumElements() * elementBytes;
  }

  /// Elements per 64-byte vector store when `op` is an elementwise kernel
  /// whose output is large enough to stream (see the pass description);
  /// 0 otherwise.
  int64_t streamingWidth(linalg::LinalgOp op) const {
    auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
    if (streamingStoreBytes <= 0 || !generic || op.hasDynamicShape() ||
        op.getNumDpsInits() != 1 || op.getNumLoops() == 0 ||
        op.getNumParallelLoops() != op.getNumLoops())
      return 0;
    OpOperand *init = op.getDpsInitOperand(0);
    auto outType = dyn_cast<MemRefType>(init->get().getType());
    if (!outType || !op.getMatchingIndexingMap(init).isIdentity() ||
        !op.getMatchingBlockArgument(init).use_empty())
      return 0;
    auto isByteAddressable = [](Type type) {
      return type.isIntOrFloat() && type.getIntOrFloatBitWidth() >= 8;
    };
    Type element = outType.getElementType();
    if (!isByteAddressable(element) || element.getIntOrFloatBitWidth() % 8)
      return 0;
    int64_t elementBytes = element.getIntOrFloatBitWidth() / 8;
    if (kStreamBytes % elementBytes)
      return 0;
    int64_t width = kStreamBytes / elementBytes;
    if (outType.getShape().back() % width ||
        streamedBytes(op, outType) < streamingStoreBytes)
      return 0;
    // Every vector store starts a multiple of 64 bytes after the output's
    // start (checked at run time): so must every row.
    SmallVector<int64_t> outStrides;
    int64_t outOffset;
    if (failed(outType.getStridesAndOffset(outStrides, outOffset)) ||
        outStrides.back() != 1 ||
        llvm::any_of(ArrayRef(outStrides).drop_back(), [&](int64_t stride) {
          return ShapedType::isDynamic(stride) ||
                 (stride * elementBytes) % kStreamBytes;
        }))
      return 0;
    unsigned inner = op.getNumLoops() - 1;
    for (OpOperand *input : op.getDpsInputOperands()) {
      auto type = dyn_cast<MemRefType>(input->get().getType());
      if (!type) {
        if (!isByteAddressable(input->get().getType()))
          return 0;
        continue; // a scalar operand
      }
      SmallVector<int64_t> strides;
      int64_t offset;
      if (failed(type.getStridesAndOffset(strides, offset)) ||
          (type.getRank() && strides.back() != 1) ||
          !isByteAddressable(type.getElementType()))
        return 0;
      AffineMap map = op.getMatchingIndexingMap(input);
      for (auto [position, result] : llvm::enumerate(map.getResults())) {
        auto dim = dyn_cast<AffineDimExpr>(result);
        if (!dim && !isa<AffineConstantExpr>(result))
          return 0;
        if (dim && dim.getPosition() == inner &&
            position + 1 != map.getNumResults())
          return 0; // strided along the vector
      }
    }
    for (Operation &bodyOp : generic.getBody()->without_terminator()) {
      if (bodyOp.getNumRegions() || !isMemoryEffectFree(&bodyOp) ||
          !llvm::all_of(bodyOp.getResultTypes(),
                        [](Type type) { return type.isIntOrFloat(); }) ||
          (bodyOp.getNumOperands() && !isa<LLVM::LoadExpOp>(bodyOp) &&
           !OpTrait::hasElementwiseMappableTraits(&bodyOp)))
        return 0;
    }
    return width;
  }

  /// Wraps `op` in `scf.if (output 64-byte aligned)` whose then branch is
  /// its vectorized loop nest with non-temporal stores (parallel like the
  /// scalar nest) and whose else branch holds `op` itself, to be lowered as
  /// usual.
  void streamStores(IRRewriter &rewriter, linalg::GenericOp op,
                    int64_t width) const {
    Location loc = op.getLoc();
    auto index = [&](int64_t value) -> Value {
      return arith::ConstantIndexOp::create(rewriter, loc, value);
    };
    Value out = op.getDpsInitOperand(0)->get();
    auto outType = cast<MemRefType>(out.getType());
    Value address =
        memref::ExtractAlignedPointerAsIndexOp::create(rewriter, loc, out);
    if (!outType.getLayout().isIdentity()) { // a tile: where it starts
      auto metadata =
          memref::ExtractStridedMetadataOp::create(rewriter, loc, out);
      Value offsetBytes = arith::MulIOp::create(
          rewriter, loc, metadata.getOffset(),
          index(outType.getElementTypeBitWidth() / 8));
      address = arith::AddIOp::create(rewriter, loc, address, offsetBytes);
    }
    Value misalignment = arith::RemUIOp::create(rewriter, loc, address,
                                                index(kStreamBytes));
    Value aligned = arith::CmpIOp::create(
        rewriter, loc, arith::CmpIPredicate::eq, misalignment, index(0));
    auto branch = scf::IfOp::create(rewriter, loc, aligned,
                                    /*withElseRegion=*/true);
    rewriter.moveOpBefore(op, branch.elseBlock()->getTerminator());

    rewriter.setInsertionPoint(branch.thenBlock()->getTerminator());
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    SmallVector<Operation *> loops;
    SmallVector<Value> ivs;
    for (auto [dim, range] : llvm::enumerate(ranges)) {
      int64_t step = dim + 1 == ranges.size() ? width : 1;
      auto loop = scf::ForOp::create(rewriter, loc, index(0), index(range),
                                     index(step));
      loops.push_back(loop);
      ivs.push_back(loop.getInductionVar());
      rewriter.setInsertionPoint(loop.getBody()->getTerminator());
    }

    // Values along the vector are vectors; the rest (scalar operands,
    // inputs broadcast along it, constants) stay scalars until an op mixes
    // them with vectors.
    IRMapping mapping;
    llvm::DenseSet<Value> vectors;
    auto vectorType = [&](Type element) -> Type {
      return VectorType::get({width}, element);
    };
    auto widen = [&](Value value) -> Value {
      if (vectors.contains(value))
        return value;
      Value wide = vector::BroadcastOp::create(
          rewriter, loc, vectorType(value.getType()), value);
      vectors.insert(wide);
      return wide;
    };
    unsigned inner = ranges.size() - 1;
    for (OpOperand *input : op.getDpsInputOperands()) {
      Value source = input->get();
      BlockArgument argument = op.getMatchingBlockArgument(input);
      auto type = dyn_cast<MemRefType>(source.getType());
      if (!type) {
        mapping.map(argument, source);
        continue;
      }
      AffineMap map = op.getMatchingIndexingMap(input);
      SmallVector<Value> indices;
      for (AffineExpr result : map.getResults()) {
        if (auto dim = dyn_cast<AffineDimExpr>(result))
          indices.push_back(ivs[dim.getPosition()]);
        else
          indices.push_back(index(cast<AffineConstantExpr>(result).getValue()));
      }
      if (map.getNumResults() &&
          map.getResults().back() == getAffineDimExpr(inner, op.getContext())) {
        Value loaded = vector::LoadOp::create(
            rewriter, loc, vectorType(type.getElementType()), source, indices);
        vectors.insert(loaded);
        mapping.map(argument, loaded);
      } else {
        mapping.map(argument,
                    memref::LoadOp::create(rewriter, loc, source, indices));
      }
    }
    for (Operation &bodyOp : op.getBody()->without_terminator()) {
      bool scalar = llvm::none_of(bodyOp.getOperands(), [&](Value operand) {
        return vectors.contains(mapping.lookupOrDefault(operand));
      });
      if (scalar) {
        rewriter.clone(bodyOp, mapping);
        continue;
      }
      SmallVector<Value> operands = llvm::map_to_vector(
          bodyOp.getOperands(),
          [&](Value operand) { return widen(mapping.lookupOrDefault(operand)); });
      SmallVector<Type> types =
          llvm::map_to_vector(bodyOp.getResultTypes(), vectorType);
      Operation *wide;
      if (isa<LLVM::LoadExpOp>(bodyOp)) {
        // Scalar-only in the LLVM dialect (lazymlir-approximate-math's exp):
        // the overloaded intrinsic takes vectors.
        wide = LLVM::CallIntrinsicOp::create(
            rewriter, bodyOp.getLoc(), types.front(),
            rewriter.getStringAttr("llvm.ldexp"), operands);
      } else {
        wide = rewriter.create(bodyOp.getLoc(),
                               bodyOp.getName().getIdentifier(), operands,
                               types, bodyOp.getAttrs());
      }
      for (auto [result, wideResult] :
           llvm::zip(bodyOp.getResults(), wide->getResults())) {
        mapping.map(result, wideResult);
        vectors.insert(wideResult);
      }
    }
    Value result = widen(mapping.lookupOrDefault(
        op.getBody()->getTerminator()->getOperand(0)));
    vector::StoreOp::create(rewriter, loc, result, out, ivs,
                            /*nontemporal=*/true,
                            llvm::MaybeAlign(kStreamBytes));

    unsigned depth = 0;
    if (isLarge(op))
      depth = ranges.size() == 1
                  ? leadingParallelDepth({ranges.front() / width})
                  : parallelDepth(op);
    if (depth > 0)
      parallelize(rewriter, loops, depth);
  }

  /// memref.copy between layouts that are not both contiguous would become
  /// a call of MLIR's generic runtime copy (memrefCopy: element by element,
  /// on one thread); a linalg.copy lowers to loops like any other op
  /// (vectorized, and parallel when large). A tensor.pad (insert_slice into
  /// a filled buffer) is such a copy: 9 MB of a conv's input gradient spent
  /// a third of its time there.
  void copiesToLinalg(IRRewriter &rewriter) {
    SmallVector<memref::CopyOp> copies;
    getOperation().walk([&](memref::CopyOp copy) {
      auto source = dyn_cast<MemRefType>(copy.getSource().getType());
      auto target = dyn_cast<MemRefType>(copy.getTarget().getType());
      if (source && target && source.hasStaticShape() &&
          !(source.getLayout().isIdentity() && target.getLayout().isIdentity()))
        copies.push_back(copy);
    });
    for (memref::CopyOp copy : copies) {
      rewriter.setInsertionPoint(copy);
      linalg::CopyOp::create(rewriter, copy.getLoc(), copy.getSource(),
                             copy.getTarget());
      rewriter.eraseOp(copy);
    }
  }

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    copiesToLinalg(rewriter);
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureBufferSemantics())
        ops.push_back(op);
    });
    for (linalg::LinalgOp op : ops) {
      rewriter.setInsertionPoint(op);
      if (int64_t width = streamingWidth(op)) {
        streamStores(rewriter, cast<linalg::GenericOp>(op.getOperation()),
                     width);
        rewriter.setInsertionPoint(op);
      }
      unsigned depth = isLarge(op) ? parallelDepth(op) : 0;
      FailureOr<linalg::LinalgLoops> loops = linalg::linalgOpToLoops(rewriter, op);
      if (failed(loops) || loops->size() < depth) {
        op.emitError("cannot lower to loops");
        return signalPassFailure();
      }
      rewriter.eraseOp(op);
      if (depth > 0)
        parallelize(rewriter, *loops, depth);
    }
    parallelizeTiles(rewriter);
  }
};

} // namespace

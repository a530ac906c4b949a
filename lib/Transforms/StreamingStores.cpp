//===- StreamingStores.cpp - non-temporal stores for large outputs --------===//

#include "lazymlir/Transforms/ParallelTiling.h"
#include "lazymlir/Transforms/Passes.h"

#include "ParallelLoops.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SmallVectorExtras.h"

namespace lazymlir {
#define GEN_PASS_DEF_STREAMINGSTORESPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// Bytes per streaming (non-temporal) store: one cache line, one AVX-512
/// register; also the alignment those stores need.
constexpr int64_t kStreamBytes = 64;

/// Vector stores per block of a parallel vector loop (4 KiB).
constexpr int64_t kBlockVectors = 64;

struct StreamingStoresPass
    : lazymlir::impl::StreamingStoresPassBase<StreamingStoresPass> {
  using Base::Base;

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

  /// Whether `op` also reads the buffer it writes (an in-place update: a
  /// donated parameter or optimizer moment). Its vector loop then stores
  /// normally: a non-temporal store to a line the loop has just read sends
  /// it to memory a second time (an in-place a += 0.001 * b over 50M floats:
  /// 18.1 ms streamed, 13.4 ms with plain stores, eager's add_ 13.0).
  static bool readsOutput(linalg::GenericOp op, Value out) {
    return llvm::any_of(op.getDpsInputOperands(),
                        [&](OpOperand *input) { return input->get() == out; });
  }

  /// Elements per 64-byte vector store when `op` is an elementwise kernel
  /// whose output is large enough to stream (see the pass description);
  /// 0 otherwise.
  int64_t streamingWidth(linalg::LinalgOp op) const {
    auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
    if (minBytes <= 0 || !generic || op.getNumDpsInits() == 0 ||
        op.getNumLoops() == 0 || op.getNumParallelLoops() != op.getNumLoops())
      return 0;
    // Whether the output is large enough is known at run time only.
    if (op.hasDynamicShape()) {
      op->emitRemark("lazymlir-streaming-stores: stores not streamed: "
                     "dynamic dimension (output size unknown)");
      return 0;
    }
    auto isByteAddressable = [](Type type) {
      return type.isIntOrFloat() && type.getIntOrFloatBitWidth() >= 8;
    };
    // Every output (a fused op may keep a producer's result beside its own)
    // written through the identity map, of one element type, stored by the
    // same vectors.
    auto firstType =
        dyn_cast<MemRefType>(op.getDpsInitOperand(0)->get().getType());
    if (!firstType)
      return 0;
    Type element = firstType.getElementType();
    if (!isByteAddressable(element) || element.getIntOrFloatBitWidth() % 8)
      return 0;
    int64_t elementBytes = element.getIntOrFloatBitWidth() / 8;
    if (kStreamBytes % elementBytes)
      return 0;
    int64_t width = kStreamBytes / elementBytes;
    if (firstType.getShape().back() % width ||
        streamedBytes(op, firstType) < minBytes)
      return 0;
    for (OpOperand &init : op.getDpsInitsMutable()) {
      auto outType = dyn_cast<MemRefType>(init.get().getType());
      if (!outType || outType.getElementType() != element ||
          outType.getShape() != firstType.getShape() ||
          !op.getMatchingIndexingMap(&init).isIdentity() ||
          !op.getMatchingBlockArgument(&init).use_empty())
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
    }
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
    Value aligned;
    for (Value out : op.getDpsInits()) {
      auto outType = cast<MemRefType>(out.getType());
      Value address =
          memref::ExtractAlignedPointerAsIndexOp::create(rewriter, loc, out);
      if (!outType.getLayout().isIdentity()) { // a tile: where it starts
        auto metadata =
            memref::ExtractStridedMetadataOp::create(rewriter, loc, out);
        Value offsetBytes =
            arith::MulIOp::create(rewriter, loc, metadata.getOffset(),
                                  index(outType.getElementTypeBitWidth() / 8));
        address = arith::AddIOp::create(rewriter, loc, address, offsetBytes);
      }
      Value misalignment =
          arith::RemUIOp::create(rewriter, loc, address, index(kStreamBytes));
      Value isAligned = arith::CmpIOp::create(
          rewriter, loc, arith::CmpIPredicate::eq, misalignment, index(0));
      aligned = aligned
                    ? arith::AndIOp::create(rewriter, loc, aligned, isAligned)
                          .getResult()
                    : isAligned;
    }
    auto branch = scf::IfOp::create(rewriter, loc, aligned,
                                    /*withElseRegion=*/true);
    rewriter.moveOpBefore(op, branch.elseBlock()->getTerminator());

    rewriter.setInsertionPoint(branch.thenBlock()->getTerminator());
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    // Every bound is defined above the nest: lazymlir::parallelizeLoopNest
    // moves the outer loops' bounds into one scf.parallel there.
    SmallVector<Value> upper, steps;
    for (auto [dim, range] : llvm::enumerate(ranges)) {
      upper.push_back(index(range));
      steps.push_back(index(dim + 1 == ranges.size() ? width : 1));
    }
    Value zero = index(0);
    SmallVector<Operation *> loops;
    SmallVector<Value> ivs;
    for (auto [bound, step] : llvm::zip(upper, steps)) {
      auto loop = scf::ForOp::create(rewriter, loc, zero, bound, step);
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
      SmallVector<Value> operands =
          llvm::map_to_vector(bodyOp.getOperands(), [&](Value operand) {
            return widen(mapping.lookupOrDefault(operand));
          });
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
        wide =
            rewriter.create(bodyOp.getLoc(), bodyOp.getName().getIdentifier(),
                            operands, types, bodyOp.getAttrs());
      }
      for (auto [result, wideResult] :
           llvm::zip(bodyOp.getResults(), wide->getResults())) {
        mapping.map(result, wideResult);
        vectors.insert(wideResult);
      }
    }
    for (auto [out, yielded] : llvm::zip(
             op.getDpsInits(), op.getBody()->getTerminator()->getOperands())) {
      Value result = widen(mapping.lookupOrDefault(yielded));
      vector::StoreOp::create(rewriter, loc, result, out, ivs,
                              /*nontemporal=*/!readsOutput(op, out),
                              llvm::MaybeAlign(kStreamBytes));
    }

    unsigned depth = 0;
    if (lazymlir::isLargeKernel(op, parallelThreshold))
      depth = ranges.size() == 1
                  ? lazymlir::leadingParallelDepth({ranges.front() / width})
                  : lazymlir::kernelParallelDepth(op);
    if (depth == loops.size()) // the vector loop itself parallel: in blocks
      lazymlir::stripMineInnermost(rewriter, loops, kBlockVectors);
    if (depth > 0)
      lazymlir::parallelizeLoopNest(rewriter, loops, depth);
  }

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureBufferSemantics())
        ops.push_back(op);
    });
    for (linalg::LinalgOp op : ops) {
      if (int64_t width = streamingWidth(op)) {
        rewriter.setInsertionPoint(op);
        streamStores(rewriter, cast<linalg::GenericOp>(op.getOperation()),
                     width);
      }
    }
  }
};

} // namespace

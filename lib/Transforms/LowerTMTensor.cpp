//===- LowerTMTensor.cpp - torch-mlir's TMTensor ops to scf loops ---------===//
//
// torch-mlir lowers scatter-like ops (index_put, scatter, scatter_add,
// index_add, embedding_dense_backward), cumulative ops (cumsum) and sort to
// its own TMTensor dialect, which MLIR 22 does not know. The frontend prints
// such modules in the generic op form, the runtime parses them with
// unregistered dialects allowed, and this pass rewrites the (unregistered)
// `tm_tensor.scatter`, `tm_tensor.scan` and `tm_tensor.sort` ops by name into
// scf.for loops over tensors (tensor.extract / tensor.insert, loop-carried
// tensors that one-shot bufferization updates in place), inlining each op's
// combiner or comparator region. Semantics follow torch-mlir's TMTensorOps.td
// and its scalar implementations (`tm-tensor-to-loops`):
//
//   scatter: ins(updates [N, u...], indices [N, D]) outs(original);
//     update (i, u...) goes to original[starts], where the update slice's
//     indices are right-aligned into the original's rank and
//     starts[dimension_map[j]] += indices[i, j]; the region maps
//     (update, current) to the new value. Positions must be in range (the
//     frontend counts index_put's negative indices from the end before
//     import); an update outside the original is skipped (never written out
//     of bounds) and fails a cf.assert, which the runtime checks turn into
//     their flag.
//   scan: ins(input) outs(output, accumulator) along `dimension`; inclusive:
//     out[0] = in[0], out[i] = f(out[i-1], in[i]); exclusive: out[0] = acc,
//     out[i] = f(out[i-1], in[i-1]); the accumulator result is out[n-1]
//     (n >= 2), else the initial accumulator.
//   sort: outs(operands...) sorted together along `dimension` by the
//     comparator region (lhs0, rhs0, lhs1, rhs1, ...) -> i1, true when lhs
//     may stay before rhs. Here: a bottom-up merge sort that takes the left
//     element iff comparator(left, right), i.e. the same order as
//     torch-mlir's bubble sort (stable for a non-strict comparator such as
//     torch.sort's `ole` / `oge`), in O(n log n).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"

namespace lazymlir {
#define GEN_PASS_DEF_LOWERTMTENSORPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// An attribute of an unregistered op: printed in the generic form as a
/// property (`<{...}>`, kept as one dictionary) or as an attribute.
Attribute getOpAttr(Operation *op, StringRef name) {
  if (Attribute attr = op->getAttr(name))
    return attr;
  if (auto props =
          dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute()))
    return props.get(name);
  return {};
}

/// The op's operands split into (inputs, outputs) by operandSegmentSizes.
LogicalResult splitOperands(Operation *op, SmallVector<Value> &inputs,
                            SmallVector<Value> &outputs) {
  auto segments =
      dyn_cast_or_null<DenseI32ArrayAttr>(getOpAttr(op, "operandSegmentSizes"));
  if (!segments || segments.size() != 2 ||
      segments[0] + segments[1] != (int64_t)op->getNumOperands())
    return op->emitError("expected operandSegmentSizes with two segments "
                         "(ins, outs)");
  auto operands = op->getOperands();
  inputs.assign(operands.begin(), operands.begin() + segments[0]);
  outputs.assign(operands.begin() + segments[0], operands.end());
  return success();
}

/// The op's single-block region with `numArgs` arguments ending in a
/// tm_tensor.yield of one value.
Block *getBody(Operation *op, unsigned numArgs) {
  if (op->getNumRegions() != 1 || !op->getRegion(0).hasOneBlock())
    return op->emitError("expected one single-block region"), nullptr;
  Block &block = op->getRegion(0).front();
  if (block.getNumArguments() != numArgs)
    return op->emitError("expected the region to have ")
               << numArgs << " arguments",
           nullptr;
  if (block.empty() ||
      block.back().getName().getStringRef() != "tm_tensor.yield" ||
      block.back().getNumOperands() != 1)
    return op->emitError("expected the region to end in a tm_tensor.yield "
                         "of one value"),
           nullptr;
  for (Operation &inner : llvm::drop_end(block.getOperations()))
    if (!inner.getName().isRegistered())
      return inner.emitError("unsupported op in a TMTensor region"), nullptr;
  return &block;
}

/// Clones `body`'s ops at `b` with its arguments bound to `args`; returns
/// the value its terminator yields.
Value inlineBody(OpBuilder &b, Block *body, ValueRange args) {
  IRMapping map;
  map.map(body->getArguments(), args);
  // The terminator (tm_tensor.yield) is unregistered: the last op.
  for (Operation &inner : llvm::drop_end(body->getOperations()))
    b.clone(inner, map);
  return map.lookupOrDefault(body->back().getOperand(0));
}

/// Ranked tensors, of static or dynamic shape (`?` sizes are read with
/// tensor.dim).
RankedTensorType getTensorType(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

/// Whether two sizes may be equal (equal, or one of them dynamic).
bool compatible(int64_t a, int64_t b) {
  return a == b || ShapedType::isDynamic(a) || ShapedType::isDynamic(b);
}

/// A destination the loops write into in place. A splat constant becomes a
/// fill of a new tensor, so that no constant of the full size is
/// materialized and copied. (A function argument stays: the pipeline marks
/// the entry's arguments not writable, lazymlir-readonly-arguments, and
/// bufferization copies it.)
Value prepareDestination(OpBuilder &b, Location loc, Value dest) {
  auto type = cast<RankedTensorType>(dest.getType());
  if (auto cst = dest.getDefiningOp<arith::ConstantOp>()) {
    if (auto splat = dyn_cast<SplatElementsAttr>(cst.getValue())) {
      Value empty = tensor::EmptyOp::create(b, loc, type.getShape(),
                                            type.getElementType());
      Value scalar = arith::ConstantOp::create(
          b, loc, cast<TypedAttr>(splat.getSplatValue<Attribute>()));
      return linalg::FillOp::create(b, loc, scalar, empty).getResult(0);
    }
  }
  return dest;
}

Value cst(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

SmallVector<Value> zeros(OpBuilder &b, Location loc, unsigned n) {
  return SmallVector<Value>(n, cst(b, loc, 0));
}
SmallVector<Value> ones(OpBuilder &b, Location loc, unsigned n) {
  return SmallVector<Value>(n, cst(b, loc, 1));
}
/// The size of dimension `d` of tensor `v`: a constant, or tensor.dim.
Value dimValue(OpBuilder &b, Location loc, Value v, int64_t d) {
  int64_t size = cast<RankedTensorType>(v.getType()).getDimSize(d);
  if (!ShapedType::isDynamic(size))
    return cst(b, loc, size);
  return tensor::DimOp::create(b, loc, v, d);
}
SmallVector<Value> dims(OpBuilder &b, Location loc, Value v,
                        ArrayRef<int64_t> which) {
  SmallVector<Value> out;
  for (int64_t d : which)
    out.push_back(dimValue(b, loc, v, d));
  return out;
}

//===----------------------------------------------------------------------===//
// scatter
//===----------------------------------------------------------------------===//

LogicalResult lowerScatter(Operation *op) {
  Location loc = op->getLoc();
  SmallVector<Value> inputs, outputs;
  if (failed(splitOperands(op, inputs, outputs)))
    return failure();
  if (inputs.size() != 2 || outputs.size() != 1 || op->getNumResults() != 1)
    return op->emitError("expected ins(updates, indices) outs(original) and "
                         "one result");
  Value updates = inputs[0], indices = inputs[1], original = outputs[0];
  auto updType = getTensorType(updates);
  auto idxType = getTensorType(indices);
  auto origType = getTensorType(original);
  if (!updType || !idxType || !origType)
    return op->emitError("expected ranked tensor operands");
  if (idxType.getRank() != 2 || !idxType.getElementType().isSignlessInteger())
    return op->emitError("expected indices of rank 2 and integer type");
  int64_t depth = idxType.getDimSize(1);
  if (ShapedType::isDynamic(depth))
    return op->emitError(
        "expected a static index depth (indices' dimension 1)");
  auto dimMap =
      dyn_cast_or_null<DenseI64ArrayAttr>(getOpAttr(op, "dimension_map"));
  if (!dimMap || (int64_t)dimMap.size() != depth)
    return op->emitError("expected a dimension_map of one entry per index");
  int64_t origRank = origType.getRank(), updRank = updType.getRank();
  int64_t offset = origRank - (updRank - 1);
  if (updRank < 1 || offset < 0 ||
      !compatible(updType.getDimSize(0), idxType.getDimSize(0)))
    return op->emitError("update and indices shapes do not match");
  for (int64_t d : dimMap.asArrayRef())
    if (d < 0 || d >= origRank)
      return op->emitError("dimension_map entry out of range");
  for (int64_t d = offset; d < origRank; ++d) {
    int64_t upd = updType.getDimSize(d - offset + 1);
    int64_t orig = origType.getDimSize(d);
    if (llvm::is_contained(dimMap.asArrayRef(), d))
      continue;
    // A dynamic size there could write past the original: refused (the
    // graph then compiles with static shapes).
    if (ShapedType::isDynamic(upd) || ShapedType::isDynamic(orig))
      return op->emitError("update slice of dynamic size in a dimension "
                           "that is not indexed");
    if (upd > orig)
      return op->emitError("update slice larger than the original");
  }
  Block *body = getBody(op, 2);
  if (!body)
    return failure();
  if (body->getArgument(0).getType() != updType.getElementType() ||
      body->getArgument(1).getType() != origType.getElementType() ||
      body->back().getOperand(0).getType() != origType.getElementType())
    return op->emitError("region types do not match the element types");

  OpBuilder b(op);
  Value init = prepareDestination(b, loc, original);
  SmallVector<int64_t> updDims =
      llvm::to_vector(llvm::seq<int64_t>(0, updRank));
  SmallVector<Value> origSizes =
      dims(b, loc, original, llvm::to_vector(llvm::seq<int64_t>(0, origRank)));
  scf::LoopNest nest = scf::buildLoopNest(
      b, loc, zeros(b, loc, updRank), dims(b, loc, updates, updDims),
      ones(b, loc, updRank), ValueRange{init},
      [&](OpBuilder &b, Location loc, ValueRange ivs,
          ValueRange iter) -> scf::ValueVector {
        Value acc = iter[0];
        SmallVector<Value> starts(origRank);
        for (int64_t k = 1; k < updRank; ++k)
          starts[offset + k - 1] = ivs[k];
        Value inBounds;
        Value zero = cst(b, loc, 0);
        for (int64_t j = 0; j < depth; ++j) {
          Value idx = tensor::ExtractOp::create(
              b, loc, indices, ValueRange{ivs[0], cst(b, loc, j)});
          Value pos = arith::IndexCastOp::create(b, loc, b.getIndexType(), idx);
          int64_t d = dimMap[j];
          if (starts[d])
            pos = arith::AddIOp::create(b, loc, pos, starts[d]);
          starts[d] = pos;
        }
        for (int64_t d : dimMap.asArrayRef()) {
          if (!starts[d])
            continue;
          Value ge = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                           starts[d], zero);
          Value lt = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                           starts[d], origSizes[d]);
          Value ok = arith::AndIOp::create(b, loc, ge, lt);
          inBounds =
              inBounds ? arith::AndIOp::create(b, loc, inBounds, ok).getResult()
                       : ok;
        }
        for (Value &s : starts)
          if (!s)
            s = zero;
        auto update = [&](OpBuilder &b, Location loc) {
          Value upd = tensor::ExtractOp::create(b, loc, updates, ivs);
          Value cur = tensor::ExtractOp::create(b, loc, acc, starts);
          Value val = inlineBody(b, body, {upd, cur});
          return tensor::InsertOp::create(b, loc, val, acc, starts).getResult();
        };
        if (!inBounds)
          return {update(b, loc)};
        // Out of range: skipped, never written, and reported (the runtime
        // checks turn the assert into their flag; eager's rerun raises).
        cf::AssertOp::create(b, loc, inBounds, "scatter index out of range");
        auto ifOp = scf::IfOp::create(
            b, loc, inBounds,
            [&](OpBuilder &b, Location loc) {
              scf::YieldOp::create(b, loc, update(b, loc));
            },
            [&](OpBuilder &b, Location loc) {
              scf::YieldOp::create(b, loc, acc);
            });
        return {ifOp.getResult(0)};
      });
  Value result = nest.results[0];
  op->getResult(0).replaceAllUsesWith(result);
  op->erase();
  return success();
}

//===----------------------------------------------------------------------===//
// scan
//===----------------------------------------------------------------------===//

LogicalResult lowerScan(Operation *op) {
  Location loc = op->getLoc();
  SmallVector<Value> inputs, outputs;
  if (failed(splitOperands(op, inputs, outputs)))
    return failure();
  if (inputs.size() != 1 || outputs.size() != 2 || op->getNumResults() != 2)
    return op->emitError("expected ins(input) outs(output, accumulator) and "
                         "two results");
  Value input = inputs[0], output = outputs[0], accInit = outputs[1];
  auto inType = getTensorType(input);
  auto outType = getTensorType(output);
  auto accType = getTensorType(accInit);
  if (!inType || !outType || !accType)
    return op->emitError("expected ranked tensor operands");
  auto dimAttr = dyn_cast_or_null<IntegerAttr>(getOpAttr(op, "dimension"));
  auto inclusiveAttr = dyn_cast_or_null<BoolAttr>(getOpAttr(op, "inclusive"));
  if (!dimAttr || !inclusiveAttr)
    return op->emitError("expected `dimension` and `inclusive` attributes");
  int64_t rank = inType.getRank(), dim = dimAttr.getInt();
  bool inclusive = inclusiveAttr.getValue();
  if (dim < 0 || dim >= rank || outType.getRank() != rank ||
      accType.getRank() != rank - 1)
    return op->emitError("scan shapes do not match");
  for (int64_t d = 0; d < rank; ++d)
    if (!compatible(outType.getDimSize(d), inType.getDimSize(d)))
      return op->emitError("scan shapes do not match");
  Block *body = getBody(op, 2);
  if (!body)
    return failure();
  Type elemType = outType.getElementType();
  if (body->back().getOperand(0).getType() != elemType ||
      inType.getElementType() != elemType ||
      accType.getElementType() != elemType)
    return op->emitError("region types do not match the element types");

  // The scan length: static, or a `?` read at run time (kDynamic here).
  int64_t n = inType.getDimSize(dim);
  bool dynamicLength = ShapedType::isDynamic(n);
  OpBuilder b(op);
  Value nV = dimValue(b, loc, input, dim);
  // Every element of the output is written: a fill of it (torch-mlir zeroes
  // it first) is dead, write into the fill's destination instead.
  Value init = output;
  if (auto fill = output.getDefiningOp<linalg::FillOp>())
    init = fill.getOutputs()[0];
  init = prepareDestination(b, loc, init);
  SmallVector<int64_t> outerDims = llvm::to_vector(llvm::seq<int64_t>(0, dim));
  SmallVector<int64_t> innerDims =
      llvm::to_vector(llvm::seq<int64_t>(dim + 1, rank));
  auto at = [&](ValueRange outer, Value i, ValueRange inner) {
    SmallVector<Value> idx(outer);
    idx.push_back(i);
    idx.append(inner.begin(), inner.end());
    return idx;
  };
  auto nestOver =
      [&](OpBuilder &b, Location loc, ArrayRef<int64_t> which, Value iter,
          function_ref<Value(OpBuilder &, Location, ValueRange, Value)> fn)
      -> Value {
    unsigned count = which.size();
    scf::LoopNest nest = scf::buildLoopNest(
        b, loc, zeros(b, loc, count), dims(b, loc, input, which),
        ones(b, loc, count), ValueRange{iter},
        [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange it)
            -> scf::ValueVector { return {fn(b, loc, ivs, it[0])}; });
    // Without loops, buildLoopNest calls the body once and returns its
    // results.
    return nest.results[0];
  };

  auto scanAll = [&](OpBuilder &b, Location loc) -> Value {
    return nestOver(
        b, loc, outerDims, init,
        [&](OpBuilder &b, Location loc, ValueRange outer, Value out) {
          // out[.., 0, ..]
          out = nestOver(
              b, loc, innerDims, out,
              [&](OpBuilder &b, Location loc, ValueRange inner, Value out) {
                Value zero = cst(b, loc, 0);
                SmallVector<Value> accIdx(outer);
                accIdx.append(inner.begin(), inner.end());
                Value first =
                    inclusive
                        ? tensor::ExtractOp::create(b, loc, input,
                                                    at(outer, zero, inner))
                              .getResult()
                        : tensor::ExtractOp::create(b, loc, accInit, accIdx)
                              .getResult();
                return tensor::InsertOp::create(b, loc, first, out,
                                                at(outer, zero, inner))
                    .getResult();
              });
          if (n == 1)
            return out; // (a dynamic length of 1 runs no iteration below)
          if (innerDims.empty()) {
            // Scan along the innermost dimension: the running value stays
            // in a register (loop-carried scalar), not reloaded from the
            // element just stored.
            Value first =
                inclusive ? tensor::ExtractOp::create(
                                b, loc, input, at(outer, cst(b, loc, 0), {}))
                                .getResult()
                          : tensor::ExtractOp::create(b, loc, accInit, outer)
                                .getResult();
            auto loop = scf::ForOp::create(
                b, loc, cst(b, loc, 1), nV, cst(b, loc, 1),
                ValueRange{out, first},
                [&](OpBuilder &b, Location loc, Value i, ValueRange it) {
                  Value iMinus1 =
                      arith::SubIOp::create(b, loc, i, cst(b, loc, 1));
                  Value x = tensor::ExtractOp::create(
                      b, loc, input, at(outer, inclusive ? i : iMinus1, {}));
                  Value val = inlineBody(b, body, {it[1], x});
                  Value next = tensor::InsertOp::create(b, loc, val, it[0],
                                                        at(outer, i, {}));
                  scf::YieldOp::create(b, loc, ValueRange{next, val});
                });
            return loop.getResult(0);
          }
          auto loop = scf::ForOp::create(
              b, loc, cst(b, loc, 1), nV, cst(b, loc, 1), ValueRange{out},
              [&](OpBuilder &b, Location loc, Value i, ValueRange it) {
                Value iMinus1 =
                    arith::SubIOp::create(b, loc, i, cst(b, loc, 1));
                Value next =
                    nestOver(b, loc, innerDims, it[0],
                             [&](OpBuilder &b, Location loc, ValueRange inner,
                                 Value out) {
                               Value prev = tensor::ExtractOp::create(
                                   b, loc, out, at(outer, iMinus1, inner));
                               Value x = tensor::ExtractOp::create(
                                   b, loc, input,
                                   at(outer, inclusive ? i : iMinus1, inner));
                               Value val = inlineBody(b, body, {prev, x});
                               return tensor::InsertOp::create(
                                          b, loc, val, out, at(outer, i, inner))
                                   .getResult();
                             });
                scf::YieldOp::create(b, loc, next);
              });
          return loop.getResult(0);
        });
  };
  // The last slice along the scan dimension: the accumulator's result.
  auto lastSlice = [&](OpBuilder &b, Location loc, Value result) -> Value {
    SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
    offsets[dim] =
        dynamicLength
            ? OpFoldResult(
                  arith::SubIOp::create(b, loc, nV, cst(b, loc, 1)).getResult())
            : OpFoldResult(b.getIndexAttr(n - 1));
    SmallVector<OpFoldResult> sizes;
    for (int64_t d = 0; d < rank; ++d)
      sizes.push_back(d == dim ? OpFoldResult(b.getIndexAttr(1))
                               : tensor::getMixedSize(b, loc, input, d));
    SmallVector<OpFoldResult> strides(rank, b.getIndexAttr(1));
    return tensor::ExtractSliceOp::create(b, loc, accType, result, offsets,
                                          sizes, strides);
  };
  Value result = init;
  Value acc = accInit;
  if (!dynamicLength) {
    if (n > 0)
      result = scanAll(b, loc);
    if (n >= 2)
      acc = lastSlice(b, loc, result);
  } else {
    // A length known at run time: nothing is read or written when it is 0,
    // and the accumulator is the last slice from 2 elements on.
    Value positive = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt,
                                           nV, cst(b, loc, 0));
    result = scf::IfOp::create(
                 b, loc, positive,
                 [&](OpBuilder &b, Location loc) {
                   scf::YieldOp::create(b, loc, scanAll(b, loc));
                 },
                 [&](OpBuilder &b, Location loc) {
                   scf::YieldOp::create(b, loc, init);
                 })
                 .getResult(0);
    Value two = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, nV,
                                      cst(b, loc, 2));
    acc = scf::IfOp::create(
              b, loc, two,
              [&](OpBuilder &b, Location loc) {
                scf::YieldOp::create(b, loc, lastSlice(b, loc, result));
              },
              [&](OpBuilder &b, Location loc) {
                scf::YieldOp::create(b, loc, accInit);
              })
              .getResult(0);
  }
  op->getResult(0).replaceAllUsesWith(result);
  op->getResult(1).replaceAllUsesWith(acc);
  op->erase();
  return success();
}

//===----------------------------------------------------------------------===//
// sort
//===----------------------------------------------------------------------===//

LogicalResult lowerSort(Operation *op) {
  Location loc = op->getLoc();
  SmallVector<Value> inputs, outputs;
  if (failed(splitOperands(op, inputs, outputs)))
    return failure();
  unsigned k = outputs.size();
  if (!inputs.empty() || k == 0 || op->getNumResults() != k)
    return op->emitError("expected outs(operands...) and one result each");
  auto type0 = getTensorType(outputs[0]);
  if (!type0)
    return op->emitError("expected ranked tensor operands");
  for (Value v : outputs) {
    auto t = getTensorType(v);
    if (!t || t.getShape() != type0.getShape())
      return op->emitError("expected operands of one shape");
  }
  auto dimAttr = dyn_cast_or_null<IntegerAttr>(getOpAttr(op, "dimension"));
  if (!dimAttr)
    return op->emitError("expected a `dimension` attribute");
  int64_t rank = type0.getRank(), dim = dimAttr.getInt();
  if (dim < 0 || dim >= rank)
    return op->emitError("sort dimension out of range");
  Block *body = getBody(op, 2 * k);
  if (!body)
    return failure();
  for (unsigned t = 0; t < k; ++t) {
    Type elem = cast<RankedTensorType>(outputs[t].getType()).getElementType();
    if (body->getArgument(2 * t).getType() != elem ||
        body->getArgument(2 * t + 1).getType() != elem)
      return op->emitError("region types do not match the element types");
  }
  if (!body->back().getOperand(0).getType().isSignlessInteger(1))
    return op->emitError("expected the comparator to yield i1");

  int64_t n = type0.getDimSize(dim);
  // The merge passes are counted at compile time.
  if (ShapedType::isDynamic(n))
    return op->emitError("sorting along a dynamic dimension is not "
                         "supported (the graph compiles with static shapes)");
  OpBuilder b(op);
  SmallVector<Value> init;
  for (Value v : outputs)
    init.push_back(prepareDestination(b, loc, v));
  if (n <= 1) {
    for (unsigned t = 0; t < k; ++t)
      op->getResult(t).replaceAllUsesWith(init[t]);
    op->erase();
    return success();
  }
  // Merge passes of run width 1, 2, 4, ... until one run covers the slice,
  // two per iteration (operands -> scratch -> operands) so that every loop
  // yields its loop-carried tensors in place; a width >= n copies.
  int64_t levels = llvm::Log2_64_Ceil(n);
  int64_t pairs = (levels + 1) / 2;
  // Scratch tensors of the operands' shapes. Not tensor.empty: CSE merges
  // equal tensor.empty ops (two i64 operands' scratch tensors), and one-shot
  // bufferization then gave both loop-carried scratch tensors one buffer.
  SmallVector<Value> scratch;
  for (Value v : outputs) {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<Value> dynamicSizes;
    for (int64_t d = 0; d < rank; ++d)
      if (type.isDynamicDim(d))
        dynamicSizes.push_back(tensor::DimOp::create(b, loc, v, d));
    scratch.push_back(
        bufferization::AllocTensorOp::create(b, loc, type, dynamicSizes));
  }
  SmallVector<int64_t> sliceDims;
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim)
      sliceDims.push_back(d);
  SmallVector<Value> iterInit(init);
  iterInit.append(scratch);

  Value nV = cst(b, loc, n);
  // Merges runs of `width` of `src` into `dst` along the sort dimension of
  // the slice at `slice`; returns the updated dst tensors.
  auto mergeLevel = [&](OpBuilder &b, Location loc, ValueRange slice,
                        ValueRange src, ValueRange dst,
                        Value width) -> SmallVector<Value> {
    auto idxAt = [&](Value pos) {
      SmallVector<Value> idx;
      unsigned s = 0;
      for (int64_t d = 0; d < rank; ++d)
        idx.push_back(d == dim ? pos : slice[s++]);
      return idx;
    };
    Value step = arith::AddIOp::create(b, loc, width, width);
    auto runs = scf::ForOp::create(
        b, loc, cst(b, loc, 0), nV, step, dst,
        [&](OpBuilder &b, Location loc, Value s, ValueRange dstIter) {
          Value mid = arith::MinSIOp::create(
              b, loc, arith::AddIOp::create(b, loc, s, width), nV);
          Value end = arith::MinSIOp::create(
              b, loc, arith::AddIOp::create(b, loc, s, step), nV);
          Value one = cst(b, loc, 1);
          Value midLast = arith::SubIOp::create(b, loc, mid, one);
          Value endLast = arith::SubIOp::create(b, loc, end, one);
          SmallVector<Value> mergeInit{s, mid};
          mergeInit.append(dstIter.begin(), dstIter.end());
          auto merge = scf::ForOp::create(
              b, loc, s, end, one, mergeInit,
              [&](OpBuilder &b, Location loc, Value pos, ValueRange it) {
                Value i = it[0], j = it[1];
                Value ic = arith::MinSIOp::create(b, loc, i, midLast);
                Value jc = arith::MinSIOp::create(b, loc, j, endLast);
                SmallVector<Value> lhs, rhs, args;
                for (unsigned t = 0; t < k; ++t) {
                  lhs.push_back(
                      tensor::ExtractOp::create(b, loc, src[t], idxAt(ic)));
                  rhs.push_back(
                      tensor::ExtractOp::create(b, loc, src[t], idxAt(jc)));
                  args.push_back(lhs.back());
                  args.push_back(rhs.back());
                }
                Value leftFirst = inlineBody(b, body, args);
                Value iLive = arith::CmpIOp::create(
                    b, loc, arith::CmpIPredicate::slt, i, mid);
                Value jDone = arith::CmpIOp::create(
                    b, loc, arith::CmpIPredicate::sge, j, end);
                Value takeLeft = arith::AndIOp::create(
                    b, loc, iLive,
                    arith::OrIOp::create(b, loc, jDone, leftFirst));
                SmallVector<Value> next{
                    arith::SelectOp::create(
                        b, loc, takeLeft, arith::AddIOp::create(b, loc, i, one),
                        i),
                    arith::SelectOp::create(
                        b, loc, takeLeft, j,
                        arith::AddIOp::create(b, loc, j, one))};
                for (unsigned t = 0; t < k; ++t) {
                  Value v =
                      arith::SelectOp::create(b, loc, takeLeft, lhs[t], rhs[t]);
                  next.push_back(tensor::InsertOp::create(b, loc, v, it[2 + t],
                                                          idxAt(pos)));
                }
                scf::YieldOp::create(b, loc, next);
              });
          scf::YieldOp::create(b, loc, merge.getResults().drop_front(2));
        });
    return SmallVector<Value>(runs.getResults().begin(),
                              runs.getResults().end());
  };

  scf::LoopNest nest = scf::buildLoopNest(
      b, loc, zeros(b, loc, sliceDims.size()),
      dims(b, loc, outputs[0], sliceDims), ones(b, loc, sliceDims.size()),
      iterInit,
      [&](OpBuilder &b, Location loc, ValueRange slice,
          ValueRange iter) -> scf::ValueVector {
        auto passes = scf::ForOp::create(
            b, loc, cst(b, loc, 0), cst(b, loc, pairs), cst(b, loc, 1), iter,
            [&](OpBuilder &b, Location loc, Value p, ValueRange it) {
              // width = 4^p, then 2 * 4^p
              Value twoP = arith::AddIOp::create(b, loc, p, p);
              Value width = arith::ShLIOp::create(b, loc, cst(b, loc, 1), twoP);
              SmallVector<Value> ops(it.take_front(k)), tmp(it.drop_front(k));
              tmp = mergeLevel(b, loc, slice, ops, tmp, width);
              Value width2 = arith::AddIOp::create(b, loc, width, width);
              ops = mergeLevel(b, loc, slice, tmp, ops, width2);
              SmallVector<Value> yield(ops);
              yield.append(tmp);
              scf::YieldOp::create(b, loc, yield);
            });
        return scf::ValueVector(passes.getResults().begin(),
                                passes.getResults().end());
      });
  for (unsigned t = 0; t < k; ++t)
    op->getResult(t).replaceAllUsesWith(nest.results[t]);
  op->erase();
  return success();
}

struct LowerTMTensorPass
    : lazymlir::impl::LowerTMTensorPassBase<LowerTMTensorPass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation()->walk([&](Operation *op) {
      StringRef name = op->getName().getStringRef();
      if (name.starts_with("tm_tensor.") && name != "tm_tensor.yield")
        ops.push_back(op);
    });
    bool failed = false;
    for (Operation *op : ops) {
      StringRef name = op->getName().getStringRef();
      LogicalResult result = failure();
      if (name == "tm_tensor.scatter")
        result = lowerScatter(op);
      else if (name == "tm_tensor.scan")
        result = lowerScan(op);
      else if (name == "tm_tensor.sort")
        result = lowerSort(op);
      else
        op->emitError("unsupported TMTensor op '") << name << "'";
      failed |= mlir::failed(result);
    }
    if (failed)
      signalPassFailure();
  }
};

} // namespace

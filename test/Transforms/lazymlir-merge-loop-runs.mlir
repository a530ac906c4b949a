// RUN: lazymlir-opt %s --split-input-file --lazymlir-merge-loop-runs | FileCheck %s

#x = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#c = affine_map<(d0, d1, d2, d3) -> (d1)>
// A convolution's bias gradient in NCHW: sum over batch, height and width.
// Height and width (read contiguously) become one 576-long reduction loop;
// the batch loop, apart from them, stays.
// CHECK-LABEL: func.func @bias_gradient
// CHECK:       %[[X:.*]] = tensor.collapse_shape %arg0 {{\[}}[0], [1], [2, 3]] : tensor<64x64x24x24xf32> into tensor<64x64x576xf32>
// CHECK:       linalg.generic
// CHECK-SAME:    iterator_types = ["reduction", "parallel", "reduction"]
// CHECK-SAME:    ins(%[[X]] : tensor<64x64x576xf32>)
func.func @bias_gradient(%x: tensor<64x64x24x24xf32>) -> tensor<64xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %r = linalg.generic {indexing_maps = [#x, #c], iterator_types = ["reduction", "parallel", "reduction", "reduction"]} ins(%x : tensor<64x64x24x24xf32>) outs(%acc : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}

// -----

#x = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#t = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
// An elementwise op with a transposed operand: the loops the transposed read
// splits stay apart, the batch loop has no neighbour of its kind to merge
// with that every operand reads in order.
// CHECK-LABEL: func.func @transposed_operand
// CHECK-NOT:   tensor.collapse_shape
// CHECK:       linalg.generic
// CHECK-SAME:    iterator_types = ["parallel", "parallel", "parallel"]
func.func @transposed_operand(%a: tensor<4x8x16xf32>, %b: tensor<4x16x8xf32>) -> tensor<4x8x16xf32> {
  %e = tensor.empty() : tensor<4x8x16xf32>
  %r = linalg.generic {indexing_maps = [#x, #t, #x], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a, %b : tensor<4x8x16xf32>, tensor<4x16x8xf32>) outs(%e : tensor<4x8x16xf32>) {
  ^bb0(%x: f32, %y: f32, %out: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x8x16xf32>
  return %r : tensor<4x8x16xf32>
}

// -----

#x = affine_map<(d0, d1) -> (d0, d1)>
// An elementwise op on contiguous operands becomes one loop.
// CHECK-LABEL: func.func @elementwise
// CHECK:       linalg.generic
// CHECK-SAME:    iterator_types = ["parallel"]
// CHECK-SAME:    tensor<96xf32>
// CHECK:       tensor.expand_shape {{.*}} : tensor<96xf32> into tensor<8x12xf32>
func.func @elementwise(%a: tensor<8x12xf32>) -> tensor<8x12xf32> {
  %e = tensor.empty() : tensor<8x12xf32>
  %r = linalg.generic {indexing_maps = [#x, #x], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x12xf32>) outs(%e : tensor<8x12xf32>) {
  ^bb0(%x: f32, %out: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<8x12xf32>
  return %r : tensor<8x12xf32>
}

// -----

// im2col's gather reads its loops inside expressions: left alone.
// CHECK-LABEL: func.func @im2col
// CHECK-NOT:   tensor.collapse_shape
// CHECK:       iterator_types = ["parallel", "parallel", "parallel"]
func.func @im2col(%x: tensor<2x4x10x10xf32>) -> tensor<2x36x64xf32> {
  %e = tensor.empty() : tensor<2x36x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1 floordiv 9, d2 floordiv 8 + (d1 mod 9) floordiv 3, d2 mod 8 + d1 mod 3)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<2x4x10x10xf32>) outs(%e : tensor<2x36x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x36x64xf32>
  return %r : tensor<2x36x64xf32>
}

// -----

#x = affine_map<(d0, d1) -> (d0, d1)>
// Ops inside tile loops keep the shape their tiling pass gave them.
// CHECK-LABEL: func.func @inside_a_tile_loop
// CHECK:       scf.for
// CHECK-NOT:   tensor.collapse_shape
// CHECK:       iterator_types = ["parallel", "parallel"]
func.func @inside_a_tile_loop(%a: tensor<8x12xf32>) -> tensor<8x12xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %r = scf.for %i = %c0 to %c2 step %c1 iter_args(%acc = %a) -> (tensor<8x12xf32>) {
    %e = tensor.empty() : tensor<8x12xf32>
    %g = linalg.generic {indexing_maps = [#x, #x], iterator_types = ["parallel", "parallel"]} ins(%acc : tensor<8x12xf32>) outs(%e : tensor<8x12xf32>) {
    ^bb0(%x: f32, %out: f32):
      %s = math.exp %x : f32
      linalg.yield %s : f32
    } -> tensor<8x12xf32>
    scf.yield %g : tensor<8x12xf32>
  }
  return %r : tensor<8x12xf32>
}

// -----

#x = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#b = affine_map<(d0, d1, d2, d3) -> (d1, 0, 0)>
// A per-channel parameter broadcast as (c, 0, 0): a map with constant
// results is left alone (upstream's collapsing built an invalid op from it).
// CHECK-LABEL: func.func @constant_results
// CHECK-NOT:   tensor.collapse_shape
// CHECK:       iterator_types = ["parallel", "parallel", "parallel", "parallel"]
func.func @constant_results(%x: tensor<2x8x16x16xf32>, %w: tensor<8x1x1xf32>) -> tensor<2x8x16x16xf32> {
  %e = tensor.empty() : tensor<2x8x16x16xf32>
  %r = linalg.generic {indexing_maps = [#x, #b, #x], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x, %w : tensor<2x8x16x16xf32>, tensor<8x1x1xf32>) outs(%e : tensor<2x8x16x16xf32>) {
  ^bb0(%a: f32, %c: f32, %out: f32):
    %s = arith.mulf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<2x8x16x16xf32>
  return %r : tensor<2x8x16x16xf32>
}

// -----

#x = affine_map<(d0, d1) -> (d0, d1)>
// An op that reads its loop indices is left alone: merged, each index would
// be divided back out of the merged one for every element.
// CHECK-LABEL: func.func @reads_indices
// CHECK-NOT:   tensor.collapse_shape
// CHECK:       iterator_types = ["parallel", "parallel"]
func.func @reads_indices(%a: tensor<8x12xi64>) -> tensor<8x12xi64> {
  %e = tensor.empty() : tensor<8x12xi64>
  %r = linalg.generic {indexing_maps = [#x, #x], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x12xi64>) outs(%e : tensor<8x12xi64>) {
  ^bb0(%x: i64, %out: i64):
    %i = linalg.index 1 : index
    %j = arith.index_cast %i : index to i64
    %s = arith.addi %x, %j : i64
    linalg.yield %s : i64
  } -> tensor<8x12xi64>
  return %r : tensor<8x12xi64>
}

// -----

#x = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d1)>
// A bias gradient (through a relu's backward) over loops in NCHW order
// (batch, channels, pixels) whose inputs are NHWC (batch, pixels,
// channels): the loops are put in the
// inputs' order, batch and pixels merge into one reduction loop outside
// the channels: a column reduction read contiguously.
// CHECK-LABEL: func.func @loops_in_input_order
// CHECK:       tensor.collapse_shape %arg0 {{\[}}[0, 1], [2]] : tensor<64x676x32xf32> into tensor<43264x32xf32>
// CHECK:       linalg.generic
// CHECK-SAME:    iterator_types = ["reduction", "parallel"]
// CHECK-SAME:    tensor<43264x32xf32>
func.func @loops_in_input_order(%g: tensor<64x676x32xf32>, %m: tensor<64x676x32xf32>) -> tensor<32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<32xf32>) -> tensor<32xf32>
  %r = linalg.generic {indexing_maps = [#x, #x, #c], iterator_types = ["reduction", "parallel", "reduction"]} ins(%g, %m : tensor<64x676x32xf32>, tensor<64x676x32xf32>) outs(%acc : tensor<32xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %zero_ = arith.constant 0.0 : f32
    %dead = arith.cmpf ole, %a, %zero_ : f32
    %p = arith.select %dead, %zero_, %b : f32
    %s = arith.addf %p, %out : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  return %r : tensor<32xf32>
}

// -----

// A dynamic (`?`) loop outside the merged run (the channels of a bias
// gradient): the 24x24 reduction is merged all the same.
// CHECK-LABEL: func.func @bias_grad
// CHECK: %[[C:.+]] = tensor.collapse_shape %arg0 {{\[\[}}0], [1, 2]] : tensor<?x24x24xf32> into tensor<?x576xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[C]] : tensor<?x576xf32>)
func.func @bias_grad(%arg0: tensor<?x24x24xf32>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %cst = arith.constant 0.000000e+00 : f32
  %dim = tensor.dim %arg0, %c0 : tensor<?x24x24xf32>
  %0 = tensor.empty(%dim) : tensor<?xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<?xf32>) -> tensor<?xf32>
  %2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0)>], iterator_types = ["parallel", "reduction", "reduction"]} ins(%arg0 : tensor<?x24x24xf32>) outs(%1 : tensor<?xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.addf %in, %out : f32
    linalg.yield %3 : f32
  } -> tensor<?xf32>
  return %2 : tensor<?xf32>
}

// -----

// Two dynamic loops are never merged: the result would be expanded back into
// two `?` sizes (see lazymlir-dynamic-expand-shapes).
// CHECK-LABEL: func.func @two_dynamic
// CHECK-NOT: tensor.collapse_shape
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel"]
func.func @two_dynamic(%arg0: tensor<?x?x8xf32>, %arg1: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<?x?x8xf32>) outs(%arg1 : tensor<?x?x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %in : f32
    linalg.yield %1 : f32
  } -> tensor<?x?x8xf32>
  return %0 : tensor<?x?x8xf32>
}

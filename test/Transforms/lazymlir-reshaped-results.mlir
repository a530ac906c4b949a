// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-reshaped-results))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-reshaped-results),one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},canonicalize,buffer-results-to-out-params{hoist-static-allocs modify-public-functions})" | FileCheck %s --check-prefix=OUT

#map = affine_map<(d0) -> (d0)>
// An update computed flat and returned as a matrix: it is computed into the
// flattened view of a matrix, which becomes the out-parameter.
// CHECK-LABEL: func.func @expanded
// CHECK: %[[E:.+]] = tensor.empty() : tensor<16x32xf32>
// CHECK: %[[C:.+]] = tensor.collapse_shape %[[E]] {{\[}}[0, 1]] : tensor<16x32xf32> into tensor<512xf32>
// CHECK: linalg.generic {{.*}} outs(%[[C]] : tensor<512xf32>)
// OUT-LABEL: func.func @expanded
// OUT-SAME: %{{.+}}: memref<16x32xf32>)
// OUT-NOT: memref.copy
// OUT: return
func.func @expanded(%a: tensor<512xf32>) -> tensor<16x32xf32> {
  %e = tensor.empty() : tensor<512xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<512xf32>) outs(%e : tensor<512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.mulf %in, %in : f32
    linalg.yield %1 : f32
  } -> tensor<512xf32>
  %r = tensor.expand_shape %0 [[0, 1]] output_shape [16, 32] : tensor<512xf32> into tensor<16x32xf32>
  return %r : tensor<16x32xf32>
}

// -----

// Heads computed apart and returned merged, by a tile loop: its initial
// value becomes the expanded view of the returned matrix.
// CHECK-LABEL: func.func @collapsed_loop
// CHECK: %[[E:.+]] = tensor.empty() : tensor<4x32xf32>
// CHECK: %[[X:.+]] = tensor.expand_shape %[[E]] {{\[}}[0], [1, 2]] output_shape [4, 2, 16] : tensor<4x32xf32> into tensor<4x2x16xf32>
// CHECK: scf.for {{.*}} iter_args(%{{.+}} = %[[X]])
// OUT-LABEL: func.func @collapsed_loop
// OUT-SAME: %{{.+}}: memref<4x32xf32>)
// OUT-NOT: memref.copy {{.*}} to memref<4x32xf32>
// OUT: return
func.func @collapsed_loop(%a: tensor<4x2x16xf32>) -> tensor<4x32xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %e = tensor.empty() : tensor<4x2x16xf32>
  %0 = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %e) -> (tensor<4x2x16xf32>) {
    %row = tensor.extract_slice %a[%i, 0, 0] [1, 2, 16] [1, 1, 1] : tensor<4x2x16xf32> to tensor<1x2x16xf32>
    %1 = tensor.insert_slice %row into %acc[%i, 0, 0] [1, 2, 16] [1, 1, 1] : tensor<1x2x16xf32> into tensor<4x2x16xf32>
    scf.yield %1 : tensor<4x2x16xf32>
  }
  %r = tensor.collapse_shape %0 [[0], [1, 2]] : tensor<4x2x16xf32> into tensor<4x32xf32>
  return %r : tensor<4x32xf32>
}

// -----

#map = affine_map<(d0) -> (d0)>
// The reshaped value is an argument's, not computed into an empty tensor:
// nothing changes.
// CHECK-LABEL: func.func @argument
// CHECK-NOT: tensor.empty
// CHECK: tensor.expand_shape %arg0
func.func @argument(%a: tensor<512xf32>) -> tensor<16x32xf32> {
  %r = tensor.expand_shape %a [[0, 1]] output_shape [16, 32] : tensor<512xf32> into tensor<16x32xf32>
  return %r : tensor<16x32xf32>
}

// -----

// Heads' weight gradient accumulated into a zero fill, returned merged: the
// fill (the end of the chain of in-place writers) fills the expanded view
// of the returned matrix.
// CHECK-LABEL: func.func @accumulated
// CHECK: %[[E:.+]] = tensor.empty() : tensor<8x32xf32>
// CHECK: %[[X:.+]] = tensor.expand_shape %[[E]] {{\[}}[0], [1, 2]] output_shape [8, 2, 16] : tensor<8x32xf32> into tensor<8x2x16xf32>
// CHECK: %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[X]] : tensor<8x2x16xf32>)
// CHECK: linalg.generic {{.*}} outs(%[[Z]] : tensor<8x2x16xf32>)
// OUT-LABEL: func.func @accumulated
// OUT-SAME: %{{.+}}: memref<8x32xf32>)
// OUT-NOT: memref.copy
// OUT: return
func.func @accumulated(%a: tensor<4x8xf32>, %b: tensor<4x2x16xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x2x16xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8x2x16xf32>) -> tensor<8x2x16xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d3, d0)>, affine_map<(d0, d1, d2, d3) -> (d3, d1, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%a, %b : tensor<4x8xf32>, tensor<4x2x16xf32>) outs(%z : tensor<8x2x16xf32>) {
  ^bb0(%x: f32, %y: f32, %out: f32):
    %1 = arith.mulf %x, %y : f32
    %2 = arith.addf %out, %1 : f32
    linalg.yield %2 : f32
  } -> tensor<8x2x16xf32>
  %r = tensor.collapse_shape %0 [[0], [1, 2]] : tensor<8x2x16xf32> into tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

#map = affine_map<(d0) -> (d0)>
// AdamW's flat update writes over the flattened parameter it reads (its
// payload ignores the init): the init becomes the collapsed view of the
// returned matrix.
// CHECK-LABEL: func.func @written_over
// CHECK: %[[E:.+]] = tensor.empty() : tensor<16x32xf32>
// CHECK: %[[C:.+]] = tensor.collapse_shape %[[E]]
// CHECK: linalg.generic {{.*}} outs(%[[C]] : tensor<512xf32>)
// OUT-LABEL: func.func @written_over
// OUT-NOT: memref.copy
// OUT: return
func.func @written_over(%p: tensor<16x32xf32> {bufferization.writable = false}, %g: tensor<16x32xf32> {bufferization.writable = false}) -> tensor<16x32xf32> {
  %pf = tensor.collapse_shape %p [[0, 1]] : tensor<16x32xf32> into tensor<512xf32>
  %gf = tensor.collapse_shape %g [[0, 1]] : tensor<16x32xf32> into tensor<512xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%pf, %gf : tensor<512xf32>, tensor<512xf32>) outs(%pf : tensor<512xf32>) {
  ^bb0(%x: f32, %y: f32, %out: f32):
    %1 = arith.subf %x, %y : f32
    linalg.yield %1 : f32
  } -> tensor<512xf32>
  %r = tensor.expand_shape %0 [[0, 1]] output_shape [16, 32] : tensor<512xf32> into tensor<16x32xf32>
  return %r : tensor<16x32xf32>
}

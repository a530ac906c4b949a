// RUN: lazymlir-opt %s --split-input-file --lazymlir-vectorize-transposes --canonicalize --cse | FileCheck %s

// A linear layer's weight read as w.t(): 16x16 blocks, each 16 contiguous
// rows read, transposed in registers and written as 16 contiguous rows; the
// block loops are marked for lazymlir-parallelize-tiles.
// CHECK-LABEL: func.func @weight_transpose
// CHECK:       scf.for %[[I:.*]] = %c0 to %c9216 step %c16
// CHECK:         scf.for %[[J:.*]] = %c0 to %c128 step %c16
// CHECK:           %[[IN:.*]] = tensor.extract_slice %arg0[%[[J]], %[[I]]] [16, 16] [1, 1]
// CHECK:           %[[V:.*]] = vector.transfer_read %[[IN]]{{.*}} : tensor<16x16xf32>, vector<16x16xf32>
// CHECK:           %[[T:.*]] = vector.transpose %[[V]], [1, 0] : vector<16x16xf32> to vector<16x16xf32>
// CHECK:           vector.transfer_write %[[T]]
// CHECK:         } {lazymlir.parallel_tiles = 1179648 : i64}
func.func @weight_transpose(%w: tensor<128x9216xf32>) -> tensor<9216x128xf32> {
  %e = tensor.empty() : tensor<9216x128xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%w : tensor<128x9216xf32>) outs(%e : tensor<9216x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<9216x128xf32>
  return %r : tensor<9216x128xf32>
}

// -----

// NHWC -> NCHW (channels x pixels, per image): the batch loop is tiled by 1
// and the block transpose stays 2-D.
// CHECK-LABEL: func.func @layout_change
// CHECK:       scf.for {{.*}} step %c1
// CHECK:         vector.transpose %{{.*}}, [1, 0] : vector<16x16xf32> to vector<16x16xf32>
func.func @layout_change(%x: tensor<4x576x64xf32>) -> tensor<4x64x576xf32> {
  %e = tensor.empty() : tensor<4x64x576xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<4x576x64xf32>) outs(%e : tensor<4x64x576xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4x64x576xf32>
  return %r : tensor<4x64x576xf32>
}

// -----

// Not transposes of this kind, left as they are: sizes not multiples of 16,
// a transpose that also computes, a permutation that keeps the innermost
// dimension innermost, and bools.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:   vector.transpose
// CHECK-NOT:   scf.for
func.func @left_alone(%a: tensor<26x26xf32>, %b: tensor<32x32xf32>, %c: tensor<4x8x32xf32>, %d: tensor<32x32xi1>) -> (tensor<26x26xf32>, tensor<32x32xf32>, tensor<8x4x32xf32>, tensor<32x32xi1>) {
  %e0 = tensor.empty() : tensor<26x26xf32>
  %r0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<26x26xf32>) outs(%e0 : tensor<26x26xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<26x26xf32>
  %e1 = tensor.empty() : tensor<32x32xf32>
  %r1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<32x32xf32>) outs(%e1 : tensor<32x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  } -> tensor<32x32xf32>
  %e2 = tensor.empty() : tensor<8x4x32xf32>
  %r2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d0, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%c : tensor<4x8x32xf32>) outs(%e2 : tensor<8x4x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<8x4x32xf32>
  %e3 = tensor.empty() : tensor<32x32xi1>
  %r3 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%d : tensor<32x32xi1>) outs(%e3 : tensor<32x32xi1>) {
  ^bb0(%in: i1, %out: i1):
    linalg.yield %in : i1
  } -> tensor<32x32xi1>
  return %r0, %r1, %r2, %r3 : tensor<26x26xf32>, tensor<32x32xf32>, tensor<8x4x32xf32>, tensor<32x32xi1>
}

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

// Not transposes of this kind, left as they are: a transposed size under 16,
// two inputs transposed by different loops, a permutation that keeps the
// innermost dimension innermost, and bools.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:   vector.transpose
// CHECK-NOT:   scf.for
func.func @left_alone(%a: tensor<40x8xf32>, %b: tensor<32x32x32xf32>, %c: tensor<4x8x32xf32>, %d: tensor<32x32xi1>) -> (tensor<8x40xf32>, tensor<32x32x32xf32>, tensor<8x4x32xf32>, tensor<32x32xi1>) {
  %e0 = tensor.empty() : tensor<8x40xf32>
  %r0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<40x8xf32>) outs(%e0 : tensor<8x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<8x40xf32>
  %e1 = tensor.empty() : tensor<32x32x32xf32>
  %r1 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2, d1)>, affine_map<(d0, d1, d2) -> (d1, d2, d0)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%b, %b : tensor<32x32x32xf32>, tensor<32x32x32xf32>) outs(%e1 : tensor<32x32x32xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %n = arith.addf %in, %in2 : f32
    linalg.yield %n : f32
  } -> tensor<32x32x32xf32>
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
  return %r0, %r1, %r2, %r3 : tensor<8x40xf32>, tensor<32x32x32xf32>, tensor<8x4x32xf32>, tensor<32x32xi1>
}

// -----

// A transpose fused into elementwise work (GPT-2's MLP backward: the GELU
// input's gradient written transposed for the weight gradient): the
// transposed inputs are read as rows and transposed in registers, the bias
// (indexed by the outer loop: one splat per row, not a transpose) and the
// scalar are broadcast, the body runs on 16x16 vectors.
// CHECK-LABEL: func.func @transpose_with_epilogue
// CHECK:       scf.for %[[I:.*]] = %c0 to %c512 step %c16
// CHECK:         scf.for %[[J:.*]] = %c0 to %c256 step %c16
// CHECK-DAG:       %[[A:.*]] = vector.transfer_read %{{.*}} : tensor<16x16xf32>, vector<16x16xf32>
// CHECK-DAG:       %[[AT:.*]] = vector.transpose %[[A]], [1, 0] : vector<16x16xf32> to vector<16x16xf32>
// CHECK-DAG:       %[[C:.*]] = vector.transfer_read %{{.*}} : tensor<16xf32>, vector<16xf32>
// CHECK-DAG:       %[[COL:.*]] = vector.shape_cast %[[C]] : vector<16xf32> to vector<16x1xf32>
// CHECK-DAG:       %[[BIAS:.*]] = vector.broadcast %[[COL]] : vector<16x1xf32> to vector<16x16xf32>
// CHECK:           %[[S:.*]] = arith.addf %[[AT]], %[[BIAS]] : vector<16x16xf32>
// CHECK:           arith.mulf %[[S]], %{{.*}} : vector<16x16xf32>
// CHECK:           vector.transfer_write %{{.*}} : vector<16x16xf32>, tensor<16x16xf32>
// CHECK:         } {lazymlir.parallel_tiles = 131072 : i64}
func.func @transpose_with_epilogue(%a: tensor<256x512xf32>, %bias: tensor<512xf32>, %s: tensor<f32>, %b: tensor<256x512xf32>) -> tensor<512x256xf32> {
  %e = tensor.empty() : tensor<512x256xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a, %bias, %s, %b : tensor<256x512xf32>, tensor<512xf32>, tensor<f32>, tensor<256x512xf32>) outs(%e : tensor<512x256xf32>) {
  ^bb0(%x: f32, %c: f32, %k: f32, %y: f32, %out: f32):
    %0 = arith.addf %x, %c : f32
    %1 = arith.mulf %0, %k : f32
    %2 = arith.mulf %1, %y : f32
    linalg.yield %2 : f32
  } -> tensor<512x256xf32>
  return %r : tensor<512x256xf32>
}

// -----

// A vocabulary of 1000 (the LM head's weight): 62 blocks of 16 and a last
// partial block of 8 peeled off, of static shape: an 8x16 read transposed
// into a 16x8 write.
// CHECK-LABEL: func.func @vocab_transpose
// CHECK:       scf.for %[[I:.*]] = %c0 to %c128 step %c16
// CHECK:         scf.for %[[J:.*]] = %c0 to %c992 step %c16
// CHECK:           vector.transpose %{{.*}}, [1, 0] : vector<16x16xf32> to vector<16x16xf32>
// CHECK:         } {lazymlir.parallel_tiles = 128000 : i64}
// CHECK:         tensor.extract_slice %arg0[992, %[[I]]] [8, 16] [1, 1]
// CHECK:         vector.transpose %{{.*}}, [1, 0] : vector<8x16xf32> to vector<16x8xf32>
// CHECK:         tensor.insert_slice %{{.*}}[%[[I]], 992] [16, 8] [1, 1]
// CHECK:       } {lazymlir.parallel_tiles = 128000 : i64}
func.func @vocab_transpose(%w: tensor<1000x128xf32>) -> tensor<128x1000xf32> {
  %e = tensor.empty() : tensor<128x1000xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%w : tensor<1000x128xf32>) outs(%e : tensor<128x1000xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<128x1000xf32>
  return %r : tensor<128x1000xf32>
}

// -----

// A dynamic (`?`) loop: full 16x16 blocks of static shape (vectorized, the
// transpose in registers) over the columns that fill them, the partial
// block peeled (scalar).
// CHECK-LABEL: func.func @weight_t
// CHECK: %[[DIM:.+]] = tensor.dim %arg0, %c0
// CHECK: scf.for {{.*}} step %c16
// CHECK: %[[FULL:.+]] = affine.apply #{{.+}}()[%[[DIM]]]
// CHECK: scf.for %{{.+}} = %c0 to %[[FULL]] step %c16
// CHECK: vector.transpose {{.*}} : vector<16x16xf32> to vector<16x16xf32>
// CHECK: scf.for %{{.+}} = %[[FULL]] to %[[DIM]] step %c16
// CHECK: linalg.generic {{.*}} ins(%{{.+}} : tensor<?x16xf32>) outs(%{{.+}} : tensor<16x?xf32>)
func.func @weight_t(%arg0: tensor<?x64xf32>) -> tensor<64x?xf32> {
  %c0 = arith.constant 0 : index
  %cst = arith.constant 2.000000e+00 : f32
  %dim = tensor.dim %arg0, %c0 : tensor<?x64xf32>
  %0 = tensor.empty(%dim) : tensor<64x?xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<?x64xf32>) outs(%0 : tensor<64x?xf32>) {
  ^bb0(%in: f32, %out: f32):
    %2 = arith.mulf %in, %cst : f32
    linalg.yield %2 : f32
  } -> tensor<64x?xf32>
  return %1 : tensor<64x?xf32>
}

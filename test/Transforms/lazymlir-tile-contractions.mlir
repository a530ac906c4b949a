// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-tile-contractions),canonicalize,cse)" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-tile-contractions{fuse-epilogue=0}),canonicalize,cse)" | FileCheck %s --check-prefix=NOEPI
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-tile-contractions{tile-m=4 tile-n=16 tile-k=4}),canonicalize,cse)" | FileCheck %s --check-prefix=SMALL
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-tile-contractions{im2col=0}),canonicalize,cse)" | FileCheck %s --check-prefix=NOIM2COL
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-tile-contractions{vectorize=0}),canonicalize,cse)" | FileCheck %s --check-prefix=NOVEC
// RUN: lazymlir-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(func.func(lazymlir-tile-contractions))" -o /dev/null
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-tile-contractions{stream-bytes=100000000}),canonicalize,cse)" | FileCheck %s --check-prefix=STREAM

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
// matmul + (bias, relu): 8x32 output tiles, K split by 8; the bias and relu
// are applied to each tile in registers and only the finished tile is
// written: no 16x64 intermediate exists.
// CHECK-LABEL: func.func @matmul_epilogue
// CHECK-SAME: (%[[A:.+]]: tensor<16x64xf32>, %[[B:.+]]: tensor<64x64xf32>, %[[BIAS:.+]]: tensor<64xf32>)
// CHECK-NOT: linalg.matmul
// CHECK-NOT: linalg.fill
// CHECK: %[[R:.+]] = scf.for %[[I:.+]] = %{{.+}} to %{{.+}} step %c8
// CHECK: scf.for %[[J:.+]] = %{{.+}} to %{{.+}} step %c32
// The accumulator is carried through the K loop as a vector (registers),
// and the epilogue takes it from there: no scratch tile in memory.
// CHECK: %[[ACC:.+]] = scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c8 iter_args(%[[A:.+]] = %{{.+}}) -> (vector<8x32xf32>)
// CHECK: %[[C:.+]] = vector.contract {{.*}} %[[A]] : vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
// CHECK-NEXT: scf.yield %[[C]]
// CHECK: vector.transfer_read %{{.+}}{{.*}} : tensor<32xf32>, vector<32xf32>
// CHECK: arith.addf %[[ACC]], {{.*}} : vector<8x32xf32>
// CHECK: arith.select {{.*}} : vector<8x32xi1>, vector<8x32xf32>
// CHECK: vector.transfer_write
// CHECK: tensor.insert_slice {{.*}}[%[[I]], %[[J]]] [8, 32] [1, 1] : tensor<8x32xf32> into tensor<16x64xf32>
// The tile loops (not the K loop) carry the matmul's size for
// lazymlir-parallelize-tiles, which may run them in parallel.
// CHECK: } {lazymlir.parallel_tiles = 65536 : i64}
// CHECK: } {lazymlir.parallel_tiles = 65536 : i64}
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]]
// Smaller tile options give smaller tiles and vectors; without vectorize
// the tiles stay linalg ops.
// SMALL-LABEL: func.func @matmul_epilogue
// SMALL: scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c4
// SMALL: scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c16
// SMALL: scf.for {{.*}} step %c4 iter_args({{.*}}) -> (vector<4x16xf32>)
// SMALL: vector.contract {{.*}} : vector<4x4xf32>, vector<4x16xf32> into vector<4x16xf32>
// NOVEC-LABEL: func.func @matmul_epilogue
// NOVEC-NOT: vector.
// NOVEC: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xf32>, tensor<8x32xf32>)
// NOVEC-NOT: vector.
// NOVEC: return
// NOEPI-LABEL: func.func @matmul_epilogue
// NOEPI: scf.for
// NOEPI: vector.contract
// NOEPI: linalg.generic
func.func @matmul_epilogue(%arg0: tensor<16x64xf32>, %arg1: tensor<64x64xf32>, %arg2: tensor<64xf32>) -> tensor<16x64xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<16x64xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<16x64xf32>) -> tensor<16x64xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<16x64xf32>, tensor<64x64xf32>) outs(%1 : tensor<16x64xf32>) -> tensor<16x64xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%2, %arg2 : tensor<16x64xf32>, tensor<64xf32>) outs(%0 : tensor<16x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %4 = arith.addf %in, %in_0 : f32
    %5 = arith.cmpf ugt, %4, %cst : f32
    %6 = arith.select %5, %4, %cst : f32
    linalg.yield %6 : f32
  } -> tensor<16x64xf32>
  return %3 : tensor<16x64xf32>
}

// -----

// Tile sizes divide the loop bounds: M=6 and N=10 (no larger than the
// tile) give one 6x10 tile, K=12 is split in 6s, so no tile is partial.
// CHECK-LABEL: func.func @odd_sizes
// CHECK: scf.for {{.*}} step %c6 {{.*}} -> (vector<6x10xf32>)
// CHECK: vector.contract {{.*}} : vector<6x6xf32>, vector<6x10xf32> into vector<6x10xf32>
func.func @odd_sizes(%arg0: tensor<6x12xf32>, %arg1: tensor<12x10xf32>) -> tensor<6x10xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<6x10xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<6x10xf32>) -> tensor<6x10xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<6x12xf32>, tensor<12x10xf32>) outs(%1 : tensor<6x10xf32>) -> tensor<6x10xf32>
  return %2 : tensor<6x10xf32>
}

// -----

// N=1000 (a vocabulary): its largest divisor up to 32 is 25, vectors of an
// odd size. Tiles of 32 instead, and the last partial tile (8 columns) is
// peeled off: both are static, both vectorize.
// CHECK-LABEL: func.func @peeled_vector_tile
// CHECK: scf.for %{{.+}} = %c0 to %c256 step %c8
// CHECK: scf.for %{{.+}} = %c0 to %c992 step %c32
// CHECK: vector.contract {{.*}} : vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
// CHECK: } {lazymlir.parallel_tiles = 32768000 : i64}
// CHECK-NOT: scf.for {{.*}} step %c32
// CHECK: vector.contract {{.*}} : vector<8x8xf32>, vector<8x8xf32> into vector<8x8xf32>
// CHECK: tensor.insert_slice {{.*}}[%{{.+}}, 992] [8, 8] [1, 1] : tensor<8x8xf32> into tensor<256x1000xf32>
// SMALL-LABEL: func.func @peeled_vector_tile
// SMALL: scf.for %{{.+}} = %c0 to %c992 step %c16
// SMALL: vector.contract {{.*}} : vector<4x4xf32>, vector<4x16xf32> into vector<4x16xf32>
// SMALL: vector.contract {{.*}} : vector<4x4xf32>, vector<4x8xf32> into vector<4x8xf32>
func.func @peeled_vector_tile(%a: tensor<256x128xf32>, %b: tensor<128x1000xf32>) -> tensor<256x1000xf32> {
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<256x1000xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<256x1000xf32>) -> tensor<256x1000xf32>
  %r = linalg.matmul ins(%a, %b : tensor<256x128xf32>, tensor<128x1000xf32>) outs(%acc : tensor<256x1000xf32>) -> tensor<256x1000xf32>
  return %r : tensor<256x1000xf32>
}

// -----

// M=26: its largest divisor up to 8 is 2, tiles of two rows. Rows are tiled
// by 8 instead and the last two rows peeled off.
// CHECK-LABEL: func.func @peeled_row_tile
// CHECK: scf.for %{{.+}} = %c0 to %c24 step %c8
// CHECK: vector.contract {{.*}} : vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
// CHECK: vector.contract {{.*}} : vector<2x8xf32>, vector<8x32xf32> into vector<2x32xf32>
// CHECK: tensor.insert_slice {{.*}}[24, %{{.+}}] [2, 32] [1, 1] : tensor<2x32xf32> into tensor<26x64xf32>
func.func @peeled_row_tile(%a: tensor<26x128xf32>, %b: tensor<128x64xf32>) -> tensor<26x64xf32> {
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<26x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<26x64xf32>) -> tensor<26x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<26x128xf32>, tensor<128x64xf32>) outs(%acc : tensor<26x64xf32>) -> tensor<26x64xf32>
  return %r : tensor<26x64xf32>
}

// -----

// batch_matmul: the batch loop is tiled by 1.
// CHECK-LABEL: func.func @batch_matmul
// CHECK: scf.for {{.*}} step %c1
// CHECK: vector.contract {{.*}} into vector<1x8x32xf32>
func.func @batch_matmul(%arg0: tensor<2x8x16xf32>, %arg1: tensor<2x16x32xf32>) -> tensor<2x8x32xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x8x32xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %2 = linalg.batch_matmul ins(%arg0, %arg1 : tensor<2x8x16xf32>, tensor<2x16x32xf32>) outs(%1 : tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  return %2 : tensor<2x8x32xf32>
}

// -----

// A 2-D NCHW convolution becomes im2col + a vectorized contraction.
// CHECK-LABEL: func.func @conv
// CHECK-NOT: linalg.conv_2d_nchw_fchw
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel", "parallel"]
// CHECK: scf.for
// CHECK: vector.contract
// Without im2col it is left alone.
// NOIM2COL-LABEL: func.func @conv
// NOIM2COL: linalg.conv_2d_nchw_fchw
// NOIM2COL-NEXT: return
func.func @conv(%arg0: tensor<2x4x10x10xf32>, %arg1: tensor<8x4x3x3xf32>) -> tensor<2x8x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x8x8x8xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %2 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%arg0, %arg1 : tensor<2x4x10x10xf32>, tensor<8x4x3x3xf32>) outs(%1 : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  return %2 : tensor<2x8x8x8xf32>
}

// -----

// An NHWC convolution is tiled directly, without im2col: output tiles of
// 8 pixels x 8 channels, the window walked one tap at a time, the input
// channels by 4; each tile is a 1-D convolution, vectorized.
// CHECK-LABEL: func.func @nhwc_conv
// CHECK-NOT: linalg.conv_2d_nhwc_hwcf
// CHECK-NOT: linalg.generic
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.for
// CHECK: vector.contract {{.*}} : vector<1x8x4xf32>, vector<4x8xf32> into vector<1x8x8xf32>
func.func @nhwc_conv(%arg0: tensor<2x10x10x4xf32>, %arg1: tensor<3x3x4x8xf32>) -> tensor<2x8x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x8x8x8xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %2 = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%arg0, %arg1 : tensor<2x10x10x4xf32>, tensor<3x3x4x8xf32>) outs(%1 : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  return %2 : tensor<2x8x8x8xf32>
}

// -----

#bias = affine_map<(d0, d1, d2, d3) -> (d1)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// conv + bias + relu + residual, as torch-mlir emits it (the bias broadcast
// initializes the accumulator): after im2col the epilogue and the bias
// broadcast are moved into the contraction's collapsed (n, f, oh*ow) space
// and tiled with it. No 4-D intermediate is computed; the only 4-D values
// are the inputs and the reshaped result.
// CHECK-LABEL: func.func @conv_bias_relu_residual
// CHECK-NOT: linalg.conv_2d_nchw_fchw
// CHECK: %[[RES:.+]] = tensor.collapse_shape %arg3 {{\[}}[0], [1], [2, 3]] : tensor<2x8x8x8xf32> into tensor<2x8x64xf32>
// CHECK: %[[OUT:.+]] = scf.for
// CHECK: scf.for
// CHECK: vector.transfer_read %arg2
// CHECK: scf.for
// CHECK: vector.contract
// CHECK: %[[RTILE:.+]] = tensor.extract_slice %[[RES]]
// CHECK: %[[R:.+]] = vector.transfer_read %[[RTILE]]
// CHECK: arith.select
// CHECK: arith.addf {{.*}}, %[[R]]
// CHECK-NOT: linalg.generic
// CHECK: %[[E:.+]] = tensor.expand_shape %[[OUT]]
// CHECK: return %[[E]]
func.func @conv_bias_relu_residual(%arg0: tensor<2x4x10x10xf32>, %arg1: tensor<8x4x3x3xf32>, %arg2: tensor<8xf32>, %arg3: tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x8x8x8xf32>
  %1 = linalg.generic {indexing_maps = [#bias, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg2 : tensor<8xf32>) outs(%0 : tensor<2x8x8x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x8x8x8xf32>
  %2 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%arg0, %arg1 : tensor<2x4x10x10xf32>, tensor<8x4x3x3xf32>) outs(%1 : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %3 = linalg.generic {indexing_maps = [#id4, #id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2, %arg3 : tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) outs(%0 : tensor<2x8x8x8xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %4 = arith.cmpf ugt, %in, %cst : f32
    %5 = arith.select %4, %in, %cst : f32
    %6 = arith.addf %5, %in_0 : f32
    linalg.yield %6 : f32
  } -> tensor<2x8x8x8xf32>
  return %3 : tensor<2x8x8x8xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
// A dynamic row count (batch x sequence), weights as arguments: full 8x32
// tiles of static shape over the rows that fill them (vectorized, with the
// bias and relu in registers), then the partial tile of fewer than 8 rows
// split into single rows of static shape (1x32 vectors). Tile loops are
// marked parallel with an unknown size (i64 max).
// CHECK-LABEL: func.func @dynamic_m
// CHECK: %[[DIM:.+]] = tensor.dim %arg0, %c0
// CHECK: %[[FULL:.+]] = affine.apply #{{.+}}()[%[[DIM]]]
// CHECK: scf.for %{{.+}} = %c0 to %[[FULL]] step %c8
// CHECK: scf.for
// CHECK: vector.contract {{.*}} : vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
// CHECK: arith.maximumf {{.*}} : vector<8x32xf32>
// CHECK: tensor.insert_slice {{.*}} [8, 32] [1, 1] : tensor<8x32xf32> into tensor<?x64xf32>
// CHECK: {lazymlir.parallel_tiles = 9223372036854775807 : i64}
// CHECK: scf.for %{{.+}} = %[[FULL]] to %[[DIM]] step %c8
// CHECK: scf.for %{{.+}} = %c0 to %{{.+}} step %c1
// CHECK: vector.contract {{.*}} : vector<1x8xf32>, vector<8x32xf32> into vector<1x32xf32>
// CHECK: linalg.generic {{.*}} outs(%{{.+}} : tensor<?x32xf32>)
// NOEPI-LABEL: func.func @dynamic_m
// NOEPI: vector.contract {{.*}} : vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
// NOEPI: vector.contract {{.*}} : vector<1x8xf32>, vector<8x32xf32> into vector<1x32xf32>
func.func @dynamic_m(%arg0: tensor<?x64xf32>, %arg1: tensor<64x64xf32>, %arg2: tensor<64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %cst = arith.constant 0.000000e+00 : f32
  %dim = tensor.dim %arg0, %c0 : tensor<?x64xf32>
  %0 = tensor.empty(%dim) : tensor<?x64xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<?x64xf32>) -> tensor<?x64xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<?x64xf32>, tensor<64x64xf32>) outs(%1 : tensor<?x64xf32>) -> tensor<?x64xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%2, %arg2 : tensor<?x64xf32>, tensor<64xf32>) outs(%0 : tensor<?x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %4 = arith.addf %in, %in_0 : f32
    %5 = arith.maximumf %4, %cst : f32
    linalg.yield %5 : f32
  } -> tensor<?x64xf32>
  return %3 : tensor<?x64xf32>
}

// -----

// A dynamic reduction (a weight gradient over batch x sequence): full steps
// of 8 with the accumulator in registers, then the rest one step at a time
// (8x1 by 1x32 outer products), all vectorized.
// CHECK-LABEL: func.func @dynamic_k
// CHECK: scf.for %{{.+}} = %c0 to %c16 step %c8
// CHECK: %[[ACC:.+]] = scf.for {{.*}} step %c8 iter_args({{.*}}) -> (vector<8x32xf32>)
// CHECK: vector.contract {{.*}} : vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
// CHECK: scf.for {{.*}} step %c8 iter_args(%{{.+}} = %[[ACC]]) -> (vector<8x32xf32>)
// CHECK: scf.for {{.*}} step %c1 {{.*}} -> (vector<8x32xf32>)
// CHECK: vector.contract {{.*}} : vector<8x1xf32>, vector<1x32xf32> into vector<8x32xf32>
// CHECK-NOT: linalg.matmul
func.func @dynamic_k(%arg0: tensor<16x?xf32>, %arg1: tensor<?x32xf32>) -> tensor<16x32xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<16x32xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<16x?xf32>, tensor<?x32xf32>) outs(%1 : tensor<16x32xf32>) -> tensor<16x32xf32>
  return %2 : tensor<16x32xf32>
}

// -----

// A dynamic vector loop (attention's scores over a dynamic sequence): full
// 8x32 tiles, then the partial tile of fewer than 32 columns in vectors of
// 8 (8x8 tiles), and the last fewer than 8 columns on masked 8-lane
// vectors: masked reads (the missing columns read as 0), an unmasked
// contraction (its extra lanes are never stored), a masked write.
// CHECK-LABEL: func.func @dynamic_n
// CHECK: scf.for {{.*}} step %c32
// CHECK: vector.contract {{.*}} : vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
// CHECK: scf.for {{.*}} step %c32
// CHECK: scf.for {{.*}} step %c8
// CHECK: vector.contract {{.*}} : vector<8x8xf32>, vector<8x8xf32> into vector<8x8xf32>
// CHECK: scf.for {{.*}} step %c8
// CHECK: %[[MASK:.+]] = vector.create_mask %c8, %{{.+}} : vector<8x8xi1>
// CHECK: vector.transfer_read {{.*}}, %[[MASK]] {in_bounds = [true, true]} : tensor<8x?xf32>, vector<8x8xf32>
// CHECK: vector.transfer_read {{.*}}, %[[MASK]] {in_bounds = [true, true]} : tensor<8x?xf32>, vector<8x8xf32>
// CHECK-NEXT: vector.contract {{.*}} : vector<8x8xf32>, vector<8x8xf32> into vector<8x8xf32>
// CHECK-NEXT: vector.transfer_write {{.*}}, %[[MASK]] {in_bounds = [true, true]} : vector<8x8xf32>, tensor<8x?xf32>
// CHECK-NOT: linalg.matmul
func.func @dynamic_n(%arg0: tensor<16x64xf32>, %arg1: tensor<64x?xf32>) -> tensor<16x?xf32> {
  %c1 = arith.constant 1 : index
  %cst = arith.constant 0.000000e+00 : f32
  %d2 = tensor.dim %arg1, %c1 : tensor<64x?xf32>
  %0 = tensor.empty(%d2) : tensor<16x?xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<16x?xf32>) -> tensor<16x?xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<16x64xf32>, tensor<64x?xf32>) outs(%1 : tensor<16x?xf32>) -> tensor<16x?xf32>
  return %2 : tensor<16x?xf32>
}

// -----

// A convolution with a dynamic batch: the batch loop tiled by 1 (scf.for
// over ?), each tile a static convolution that takes the direct path
// (vectorized); left whole it lowered to scalar loops, 15-20x slower.
// CHECK-LABEL: func.func @dynamic_conv
// CHECK: %[[N:.+]] = tensor.dim %arg0, %c0 : tensor<?x10x10x4xf32>
// CHECK: scf.for %{{.+}} = %c0 to %[[N]] step %c1
// CHECK: tensor.extract_slice %arg0[%{{.+}}, 0, 0, 0] [1, 10, 10, 4]
// CHECK: vector.contract
// The batch loop may run in parallel (each iteration writes its own slice).
// CHECK: } {lazymlir.parallel_tiles = 9223372036854775807 : i64}
// CHECK-NEXT: return
// CHECK-NOT: linalg.conv_2d_nhwc_hwcf
func.func @dynamic_conv(%arg0: tensor<?x10x10x4xf32>, %arg1: tensor<3x3x4x8xf32>, %arg2: tensor<?x8x8x8xf32>) -> tensor<?x8x8x8xf32> {
  %0 = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%arg0, %arg1 : tensor<?x10x10x4xf32>, tensor<3x3x4x8xf32>) outs(%arg2 : tensor<?x8x8x8xf32>) -> tensor<?x8x8x8xf32>
  return %0 : tensor<?x8x8x8xf32>
}

// -----

#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d3)>
// With an elementwise epilogue (bias, ReLU), the epilogue is tiled over the
// batch and the convolution fused into it: one batch loop, each sample's
// output tiles computed, finished and written once (vectorized max), no
// convolution or epilogue left whole.
// CHECK-LABEL: func.func @dynamic_conv_relu
// CHECK: scf.for %{{.+}} = %c0 to %{{.+}} step %c1
// CHECK: vector.contract
// CHECK: arith.maximumf %{{.+}}, %{{.+}} : vector<1x1x8x8xf32>
// CHECK: } {lazymlir.parallel_tiles = 9223372036854775807 : i64}
// CHECK-NEXT: return
// CHECK-NOT: linalg.generic
func.func @dynamic_conv_relu(%x: tensor<?x10x10x4xf32>, %w: tensor<3x3x4x8xf32>, %b: tensor<8xf32>) -> tensor<?x8x8x8xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %n = tensor.dim %x, %c0 : tensor<?x10x10x4xf32>
  %e = tensor.empty(%n) : tensor<?x8x8x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<?x8x8x8xf32>) -> tensor<?x8x8x8xf32>
  %conv = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<?x10x10x4xf32>, tensor<3x3x4x8xf32>) outs(%acc : tensor<?x8x8x8xf32>) -> tensor<?x8x8x8xf32>
  %r = linalg.generic {indexing_maps = [#id, #ch, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%conv, %b : tensor<?x8x8x8xf32>, tensor<8xf32>) outs(%e : tensor<?x8x8x8xf32>) {
  ^bb0(%in: f32, %bias: f32, %out: f32):
    %s = arith.addf %in, %bias : f32
    %m = arith.maximumf %s, %zero : f32
    linalg.yield %m : f32
  } -> tensor<?x8x8x8xf32>
  return %r : tensor<?x8x8x8xf32>
}

// -----

// A weight gradient over a dynamic batch (the batch is the convolution's
// reduced channel dimension): that loop accumulates into the static output,
// sequentially (unmarked), in chunks of tile-k (8) channels, each im2col + a
// vectorized contraction with K = 8 x 64, then the rest a channel at a time.
// CHECK-LABEL: func.func @dynamic_weight_grad
// CHECK: scf.for %{{.+}} = %c0 to %{{.+}} step %c8 iter_args(%{{.+}} = %arg2) -> (tensor<8x16x3x3xf32>)
// CHECK: tensor.extract_slice %arg0[0, %{{.+}}, 0, 0] [8, 8, 10, 10]
// CHECK: scf.for %{{.+}} = %c0 to %c512 step %c8
// CHECK: vector.contract
// CHECK: } {lazymlir.parallel_tiles = 589824 : i64}
// CHECK: } {lazymlir.parallel_tiles = 589824 : i64}
// CHECK-NEXT: tensor.expand_shape
// CHECK-NEXT: scf.yield
// CHECK-NEXT: {{^ *}}}{{$}}
// CHECK: scf.for %{{.+}} step %c8 iter_args
// CHECK: scf.for %{{.+}} = %c0 to %{{.+}} step %c1 iter_args
// CHECK: tensor<8x1x10x10xf32>
// CHECK: vector.contract
// CHECK-NOT: linalg.conv_2d_nchw_fchw
func.func @dynamic_weight_grad(%x: tensor<8x?x10x10xf32>, %g: tensor<16x?x8x8xf32>, %acc: tensor<8x16x3x3xf32>) -> tensor<8x16x3x3xf32> {
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %g : tensor<8x?x10x10xf32>, tensor<16x?x8x8xf32>) outs(%acc : tensor<8x16x3x3xf32>) -> tensor<8x16x3x3xf32>
  return %0 : tensor<8x16x3x3xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
// An epilogue reading a bool mask (dropout backward) is tiled with the
// contraction but not vectorized: vector<...xi1> is bit-packed in LLVM while
// bool memory holds a byte per element.
// CHECK-LABEL: func.func @i1_epilogue
// CHECK: scf.for
// CHECK: vector.contract
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<8x32xf32>, tensor<8x32xi1>)
// CHECK-NOT: vector<8x32xi1>
func.func @i1_epilogue(%arg0: tensor<8x16xf32>, %arg1: tensor<16x32xf32>, %mask: tensor<8x32xi1>) -> tensor<8x32xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<8x32xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<8x16xf32>, tensor<16x32xf32>) outs(%1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%2, %mask : tensor<8x32xf32>, tensor<8x32xi1>) outs(%0 : tensor<8x32xf32>) {
  ^bb0(%in: f32, %m: i1, %out: f32):
    %4 = arith.select %m, %in, %cst : f32
    linalg.yield %4 : f32
  } -> tensor<8x32xf32>
  return %3 : tensor<8x32xf32>
}

// -----

#a = affine_map<(d0, d1, d2, d3) -> (d2, d3, d0)>
#b = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
// A weight gradient reduced over batch x sequence: the two adjacent
// reduction loops, contiguous in both operands, become one (the operands
// are reshaped in place), tiled by 8 and vectorized as one 8x8 by 8x32
// contraction per step, A read transposed in place.
// CHECK-LABEL: func.func @two_reduction_loops
// CHECK-DAG:     %[[A:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<4x64x512xf32> into tensor<256x512xf32>
// CHECK-DAG:     %[[B:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<4x64x128xf32> into tensor<256x128xf32>
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK:             scf.for %{{.*}} = %c0 to %c256 step %c8
// CHECK:               vector.contract
// CHECK-SAME:            vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
// CHECK-NOT:     linalg.generic
func.func @two_reduction_loops(%g: tensor<4x64x512xf32>, %x: tensor<4x64x128xf32>) -> tensor<512x128xf32> {
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<512x128xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<512x128xf32>) -> tensor<512x128xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%g, %x : tensor<4x64x512xf32>, tensor<4x64x128xf32>) outs(%acc : tensor<512x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<512x128xf32>
  return %r : tensor<512x128xf32>
}

// -----

#a = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>
#b = affine_map<(d0, d1, d2, d3, d4) -> (d4, d2, d3)>
#c = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
// A projection into attention heads (batch x sequence by heads x head
// size), without an epilogue: both runs of parallel loops are merged too,
// and it is tiled as a 256x128 by 128 matmul; the result is reshaped back.
// CHECK-LABEL: func.func @head_projection
// CHECK-DAG:     tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<4x64x128xf32> into tensor<256x128xf32>
// CHECK-DAG:     tensor.collapse_shape %{{.*}} {{\[\[}}0], [1, 2]] : tensor<128x4x32xf32> into tensor<128x128xf32>
// CHECK:         vector.contract
// CHECK-SAME:      vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
// CHECK:         tensor.expand_shape %{{.*}} {{\[\[}}0, 1], [2, 3]] {{.*}} : tensor<256x128xf32> into tensor<4x64x4x32xf32>
func.func @head_projection(%x: tensor<4x64x128xf32>, %w: tensor<128x4x32xf32>) -> tensor<4x64x4x32xf32> {
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<4x64x4x32xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<4x64x4x32xf32>) -> tensor<4x64x4x32xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%x, %w : tensor<4x64x128xf32>, tensor<128x4x32xf32>) outs(%acc : tensor<4x64x4x32xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<4x64x4x32xf32>
  return %r : tensor<4x64x4x32xf32>
}

// -----

// B (4112x2048, 34 MB) larger than stream-bytes (16 MiB) and than A (8 MB):
// the column tiles are visited outside the row tiles, so that each column
// strip of B is read once for all rows (rows outside, B came from memory
// once per row of tiles: ViT's weight gradient). stream-bytes past B's size
// keeps the rows outside.
// CHECK-LABEL: func.func @large_b
// CHECK:         scf.for %{{.+}} = %c0 to %c2048 step %c32
// CHECK:           scf.for %{{.+}} = %c0 to %c512 step %c8
// CHECK:             scf.for {{.*}} to %c4112 step %c8 iter_args({{.*}}) -> (vector<8x32xf32>)
// STREAM-LABEL: func.func @large_b
// STREAM:         scf.for %{{.+}} = %c0 to %c512 step %c8
// STREAM:           scf.for %{{.+}} = %c0 to %c2048 step %c32
func.func @large_b(%a: tensor<512x4112xf32>, %b: tensor<4112x2048xf32>) -> tensor<512x2048xf32> {
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<512x2048xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<512x2048xf32>) -> tensor<512x2048xf32>
  %r = linalg.matmul ins(%a, %b : tensor<512x4112xf32>, tensor<4112x2048xf32>) outs(%acc : tensor<512x2048xf32>) -> tensor<512x2048xf32>
  return %r : tensor<512x2048xf32>
}

// -----

// A larger than B (B 8 MB, under stream-bytes): the rows stay outside.
// CHECK-LABEL: func.func @large_a
// CHECK:         scf.for %{{.+}} = %c0 to %c2048 step %c8
// CHECK:           scf.for %{{.+}} = %c0 to %c512 step %c32
func.func @large_a(%a: tensor<2048x4112xf32>, %b: tensor<4112x512xf32>) -> tensor<2048x512xf32> {
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<2048x512xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<2048x512xf32>) -> tensor<2048x512xf32>
  %r = linalg.matmul ins(%a, %b : tensor<2048x4112xf32>, tensor<4112x512xf32>) outs(%acc : tensor<2048x512xf32>) -> tensor<2048x512xf32>
  return %r : tensor<2048x512xf32>
}

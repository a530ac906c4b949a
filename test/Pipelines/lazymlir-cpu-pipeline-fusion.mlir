// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="fusion=false" | FileCheck %s --check-prefix=UNFUSED

// matmul + bias: with fusion the bias is the contraction's epilogue, applied
// to each output tile (lazymlir-tile-contractions' fuse-epilogue): one
// kernel. fusion=false also turns the epilogue fusion off: two kernels.
// CHECK: module attributes {lazymlir.kernel_count = 1 : i64}
// UNFUSED: module attributes {lazymlir.kernel_count = 2 : i64}
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @main(%arg0: tensor<16x64xf32>, %arg1: tensor<64x64xf32>, %arg2: tensor<64xf32>) -> tensor<16x64xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<16x64xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<16x64xf32>) -> tensor<16x64xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<16x64xf32>, tensor<64x64xf32>) outs(%1 : tensor<16x64xf32>) -> tensor<16x64xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%2, %arg2 : tensor<16x64xf32>, tensor<64xf32>) outs(%0 : tensor<16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %4 = arith.addf %in, %in_1 : f32
    linalg.yield %4 : f32
  } -> tensor<16x64xf32>
  return %3 : tensor<16x64xf32>
}

// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="threads=2" 2>&1 | FileCheck %s --check-prefixes=CHECK,PARALLEL
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="threads=1" 2>&1 | FileCheck %s --check-prefixes=CHECK,SEQ
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="fusion=false" 2>&1 | FileCheck %s --check-prefixes=CHECK,UNFUSED
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="threads=1" 2>&1 | FileCheck %s --check-prefix=NOCOPY

// The MLP's forward (Linear 784->128, relu, Linear 128->10, log_softmax)
// with a dynamic batch and the weights as arguments, as torch-mlir imports
// it (torch.export.Dim on the batch): one compiled graph for every batch
// size. The first linear layer is a call of the runtime GEMM with the
// batch read from the buffer (lazymlir-gemm-calls), the second (10
// outputs, too narrow for it) is tiled and vectorized as static ones are,
// the tile loops run in parallel with threads > 1, and no dynamic size
// (ShapedType::kDynamic, INT64_MIN) ever reaches the code as a constant.
// Only streaming stores are skipped (the output's size is unknown), and
// say so on stderr.
// CHECK: remark: lazymlir-streaming-stores: stores not streamed: dynamic dimension
// CHECK-NOT: remark: lazymlir-tile-contractions
// CHECK-NOT: remark: lazymlir-parallelize-tiles
// CHECK-NOT: error
// CHECK: lazymlir.kernel_count = [[N:[0-9]+]]
// CHECK-NOT: -9223372036854775808
// CHECK: llvm.func @main(
// CHECK-NOT: -9223372036854775808
// CHECK: llvm.call @lazymlir_sgemm_batched(
// CHECK-NOT: -9223372036854775808
// The result (batch x 10, allocated by the caller at the run's size) is
// written in place: no temporary copied into the out-parameter
// (hoist-dynamic-allocs).
// NOCOPY: lazymlir.kernel_count
// NOCOPY-NOT: memcpy
// NOCOPY-NOT: memrefCopy
// PARALLEL: omp.parallel
// SEQ-NOT: omp.parallel
// UNFUSED-NOT: omp.parallel
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
#map2 = affine_map<(d0, d1) -> (d0)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
module {
  func.func @main(%arg0: tensor<?x784xf32>, %arg1: tensor<128x784xf32>, %arg2: tensor<128xf32>, %arg3: tensor<10x128xf32>, %arg4: tensor<10xf32>) -> tensor<?x10xf32> {
    %c0 = arith.constant 0 : index
    %cst = arith.constant 0.000000e+00 : f32
    %c0_i64 = arith.constant 0 : i64
    %cst_0 = arith.constant 0xFF800000 : f32
    %0 = tensor.empty() : tensor<784x128xf32>
    %transposed = linalg.transpose ins(%arg1 : tensor<128x784xf32>) outs(%0 : tensor<784x128xf32>) permutation = [1, 0] 
    %dim = tensor.dim %arg0, %c0 : tensor<?x784xf32>
    %1 = tensor.empty(%dim) : tensor<?x128xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<?x128xf32>) -> tensor<?x128xf32>
    %3 = linalg.matmul ins(%arg0, %transposed : tensor<?x784xf32>, tensor<784x128xf32>) outs(%2 : tensor<?x128xf32>) -> tensor<?x128xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%3, %arg2 : tensor<?x128xf32>, tensor<128xf32>) outs(%1 : tensor<?x128xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %23 = arith.addf %in, %in_2 : f32
      linalg.yield %23 : f32
    } -> tensor<?x128xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%4 : tensor<?x128xf32>) outs(%1 : tensor<?x128xf32>) {
    ^bb0(%in: f32, %out: f32):
      %23 = arith.cmpf ugt, %in, %cst : f32
      %24 = arith.select %23, %in, %cst : f32
      linalg.yield %24 : f32
    } -> tensor<?x128xf32>
    %6 = tensor.empty() : tensor<128x10xf32>
    %transposed_1 = linalg.transpose ins(%arg3 : tensor<10x128xf32>) outs(%6 : tensor<128x10xf32>) permutation = [1, 0] 
    %7 = tensor.empty(%dim) : tensor<?x10xf32>
    %8 = linalg.fill ins(%cst : f32) outs(%7 : tensor<?x10xf32>) -> tensor<?x10xf32>
    %9 = linalg.matmul ins(%5, %transposed_1 : tensor<?x128xf32>, tensor<128x10xf32>) outs(%8 : tensor<?x10xf32>) -> tensor<?x10xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%9, %arg4 : tensor<?x10xf32>, tensor<10xf32>) outs(%7 : tensor<?x10xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %23 = arith.addf %in, %in_2 : f32
      linalg.yield %23 : f32
    } -> tensor<?x10xf32>
    %11 = tensor.empty(%dim) : tensor<?xi64>
    %12 = linalg.fill ins(%c0_i64 : i64) outs(%11 : tensor<?xi64>) -> tensor<?xi64>
    %13 = tensor.empty(%dim) : tensor<?xf32>
    %14 = linalg.fill ins(%cst_0 : f32) outs(%13 : tensor<?xf32>) -> tensor<?xf32>
    %15:2 = linalg.generic {indexing_maps = [#map, #map2, #map2], iterator_types = ["parallel", "reduction"]} ins(%10 : tensor<?x10xf32>) outs(%14, %12 : tensor<?xf32>, tensor<?xi64>) {
    ^bb0(%in: f32, %out: f32, %out_2: i64):
      %23 = linalg.index 1 : index
      %24 = arith.index_cast %23 : index to i64
      %25 = arith.maximumf %in, %out : f32
      %26 = arith.cmpf ogt, %in, %out : f32
      %27 = arith.select %26, %24, %out_2 : i64
      linalg.yield %25, %27 : f32, i64
    } -> (tensor<?xf32>, tensor<?xi64>)
    %expanded = tensor.expand_shape %15#0 [[0, 1]] output_shape [%dim, 1] : tensor<?xf32> into tensor<?x1xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel"]} ins(%10, %expanded : tensor<?x10xf32>, tensor<?x1xf32>) outs(%7 : tensor<?x10xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %23 = arith.subf %in, %in_2 : f32
      linalg.yield %23 : f32
    } -> tensor<?x10xf32>
    %17 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%16 : tensor<?x10xf32>) outs(%7 : tensor<?x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      %23 = math.exp %in : f32
      linalg.yield %23 : f32
    } -> tensor<?x10xf32>
    %18 = tensor.empty(%dim) : tensor<?x1xf32>
    %19 = linalg.fill ins(%cst : f32) outs(%18 : tensor<?x1xf32>) -> tensor<?x1xf32>
    %20 = linalg.generic {indexing_maps = [#map, #map3], iterator_types = ["parallel", "reduction"]} ins(%17 : tensor<?x10xf32>) outs(%19 : tensor<?x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %23 = arith.addf %in, %out : f32
      linalg.yield %23 : f32
    } -> tensor<?x1xf32>
    %21 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%20 : tensor<?x1xf32>) outs(%18 : tensor<?x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %23 = math.log %in : f32
      linalg.yield %23 : f32
    } -> tensor<?x1xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel"]} ins(%16, %21 : tensor<?x10xf32>, tensor<?x1xf32>) outs(%7 : tensor<?x10xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %23 = arith.subf %in, %in_2 : f32
      linalg.yield %23 : f32
    } -> tensor<?x10xf32>
    return %22 : tensor<?x10xf32>
  }
}

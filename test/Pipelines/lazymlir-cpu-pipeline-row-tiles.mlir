// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="fusion threads=2 streaming-store-bytes=65536" | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="fusion threads=2" | FileCheck %s --check-prefix=SMALL

// Softmax over 256x1024 f32 as torch-mlir lowers it (max with indices, exp,
// sum, divide). Fusion makes one loop over tiles of 16 rows; with its 1 MiB
// output streamed (non-temporal vector stores), the vectorized normalizing
// pass also prefetches the next tile (lazymlir-prefetch-row-tiles), inside
// the OpenMP loop over the tiles. Below the streaming threshold the
// normalizing pass stays scalar for LLVM to vectorize, without prefetches.
// The tile's row maxima and sums are on each thread's stack, allocated once
// per thread before the worksharing loop (lazymlir-per-thread-scratch), not
// from the runtime's pool in every tile.
// CHECK-LABEL: llvm.func @__lazymlir_k_
// CHECK: omp.parallel
// CHECK-NEXT: llvm.alloca {{.+}} x f32
// CHECK-NEXT: llvm.alloca {{.+}} x f32
// CHECK-NEXT: omp.wsloop
// CHECK-NOT: _mlir_memref_to_llvm_aligned_alloc
// CHECK: llvm.intr.prefetch
// CHECK-SAME: cache = 1 : i32, hint = 3 : i32, rw = 0 : i32
// CHECK: nontemporal
// CHECK-NOT: _mlir_memref_to_llvm_free
// CHECK: omp.terminator
// CHECK-NOT: lazymlir.row_tiles
// SMALL-LABEL: llvm.func @__lazymlir_k_
// SMALL-NOT: llvm.intr.prefetch
// SMALL: llvm.return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
module {
  func.func @main(%arg0: tensor<256x1024xf32>) -> tensor<256x1024xf32> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0xFF800000 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<256xi64>
    %1 = linalg.fill ins(%c0_i64 : i64) outs(%0 : tensor<256xi64>) -> tensor<256xi64>
    %2 = tensor.empty() : tensor<256xf32>
    %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<256xf32>) -> tensor<256xf32>
    %4:2 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<256x1024xf32>) outs(%3, %1 : tensor<256xf32>, tensor<256xi64>) {
    ^bb0(%in: f32, %out: f32, %out_1: i64):
      %12 = linalg.index 1 : index
      %13 = arith.index_cast %12 : index to i64
      %14 = arith.maximumf %in, %out : f32
      %15 = arith.cmpf ogt, %in, %out : f32
      %16 = arith.select %15, %13, %out_1 : i64
      linalg.yield %14, %16 : f32, i64
    } -> (tensor<256xf32>, tensor<256xi64>)
    %expanded = tensor.expand_shape %4#0 [[0, 1]] output_shape [256, 1] : tensor<256xf32> into tensor<256x1xf32>
    %5 = tensor.empty() : tensor<256x1024xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %expanded : tensor<256x1024xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x1024xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.subf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<256x1024xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<256x1024xf32>) outs(%5 : tensor<256x1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = math.exp %in : f32
      linalg.yield %12 : f32
    } -> tensor<256x1024xf32>
    %8 = tensor.empty() : tensor<256x1xf32>
    %9 = linalg.fill ins(%cst_0 : f32) outs(%8 : tensor<256x1xf32>) -> tensor<256x1xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%7 : tensor<256x1024xf32>) outs(%9 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = arith.addf %in, %out : f32
      linalg.yield %12 : f32
    } -> tensor<256x1xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%7, %10 : tensor<256x1024xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x1024xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.divf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<256x1024xf32>
    return %11 : tensor<256x1024xf32>
  }
}

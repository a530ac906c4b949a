// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="fusion=0" | FileCheck %s

// Unfused, the 256 KB intermediate (read transposed, so the second op
// cannot write over it) is a temporary: it comes from the
// runtime's pool (generic allocation functions), not from malloc, and is
// released after its last use.
// CHECK-LABEL: llvm.func @main
// CHECK-NOT: @malloc
// CHECK: %[[BUF:.+]] = llvm.call @_mlir_memref_to_llvm_aligned_alloc(
// CHECK: llvm.call @_mlir_memref_to_llvm_free(
// CHECK: llvm.return
#map = affine_map<(d0, d1) -> (d0, d1)>
#transposed = affine_map<(d0, d1) -> (d1, d0)>
func.func @main(%arg0: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %e = tensor.empty() : tensor<256x256xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<256x256xf32>) outs(%e : tensor<256x256xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %in : f32
    linalg.yield %1 : f32
  } -> tensor<256x256xf32>
  %2 = linalg.generic {indexing_maps = [#transposed, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<256x256xf32>) outs(%e : tensor<256x256xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.mulf %in, %in : f32
    linalg.yield %3 : f32
  } -> tensor<256x256xf32>
  return %2 : tensor<256x256xf32>
}

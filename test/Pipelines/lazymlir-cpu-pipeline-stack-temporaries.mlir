// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="fusion=0" | FileCheck %s

// The pipeline promotes temporaries of at most 16 KiB (and rank <= 4) to the
// stack (promote-buffers-to-stack{max-alloc-size-in-bytes=16384}): this 8 KiB
// intermediate is an alloca, not a pool allocation (the 256 KB one of
// lazymlir-cpu-pipeline-temporaries.mlir is not).
// CHECK-LABEL: llvm.func @main
// CHECK-NOT: @_mlir_memref_to_llvm_aligned_alloc
// CHECK: llvm.alloca
// CHECK-NOT: @_mlir_memref_to_llvm_aligned_alloc
// CHECK: llvm.return
#map = affine_map<(d0, d1) -> (d0, d1)>
#transposed = affine_map<(d0, d1) -> (d1, d0)>
func.func @main(%arg0: tensor<32x64xf32>) -> tensor<64x32xf32> {
  %e = tensor.empty() : tensor<32x64xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<32x64xf32>) outs(%e : tensor<32x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %in : f32
    linalg.yield %1 : f32
  } -> tensor<32x64xf32>
  %f = tensor.empty() : tensor<64x32xf32>
  %2 = linalg.generic {indexing_maps = [#transposed, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<32x64xf32>) outs(%f : tensor<64x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.mulf %in, %in : f32
    linalg.yield %3 : f32
  } -> tensor<64x32xf32>
  return %2 : tensor<64x32xf32>
}

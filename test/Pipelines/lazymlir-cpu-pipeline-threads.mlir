// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="threads=2" | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline | FileCheck %s --check-prefix=SEQ

// With threads, a large kernel's rows are split into blocks dispatched to
// MLIR's async runtime; by default everything runs in the calling thread.
// CHECK-LABEL: llvm.func @main
// CHECK: llvm.call @mlirAsyncRuntimeCreateGroup
// CHECK: llvm.call @mlirAsyncRuntimeAwaitAllInGroup
// SEQ-NOT: mlirAsyncRuntime
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @main(%arg0: tensor<1024x256xf32>) -> tensor<1024xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1024xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<1024xf32>) -> tensor<1024xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<1024x256xf32>) outs(%f : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = math.exp %in : f32
    %2 = arith.addf %1, %out : f32
    linalg.yield %2 : f32
  } -> tensor<1024xf32>
  return %0 : tensor<1024xf32>
}

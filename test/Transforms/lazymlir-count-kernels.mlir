// RUN: lazymlir-opt %s --lazymlir-count-kernels | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline | FileCheck %s --check-prefix=PIPELINE
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="fusion=0" | FileCheck %s --check-prefix=UNFUSED
// RUN: lazymlir-opt %s --lazymlir-count-kernels=entry=other | FileCheck %s --check-prefix=OTHER

// Three elementwise ops: three kernels as written, one after fusion; the
// count survives the lowering to the LLVM dialect.
// CHECK: module attributes {lazymlir.kernel_count = 3 : i64}
// PIPELINE: module attributes {lazymlir.kernel_count = 1 : i64}
// UNFUSED: module attributes {lazymlir.kernel_count = 3 : i64}
// An entry that does not exist: nothing counted.
// OTHER-NOT: lazymlir.kernel_count
// PIPELINE: llvm.func @main
#map = affine_map<(d0) -> (d0)>
func.func @main(%arg0: tensor<64xf32>) -> tensor<64xf32> {
  %e = tensor.empty() : tensor<64xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %in : f32
    linalg.yield %1 : f32
  } -> tensor<64xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%0 : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = math.exp %in : f32
    linalg.yield %3 : f32
  } -> tensor<64xf32>
  %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%2 : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %5 = arith.negf %in : f32
    linalg.yield %5 : f32
  } -> tensor<64xf32>
  return %4 : tensor<64xf32>
}

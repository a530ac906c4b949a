// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-distinct-results))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --lazymlir-cpu-pipeline | FileCheck %s --check-prefix=LOWERED

// CHECK-LABEL: func.func @main
// CHECK: %[[V:.+]] = linalg.generic
// CHECK: %[[E:.+]] = tensor.empty() : tensor<4xf32>
// CHECK: %[[C:.+]] = linalg.copy ins(%[[V]] : tensor<4xf32>) outs(%[[E]] : tensor<4xf32>)
// CHECK: return %[[V]], %[[C]], %arg0
// LOWERED-LABEL: llvm.func @main
// LOWERED: llvm.return
#map = affine_map<(d0) -> (d0)>
func.func @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = tensor.empty() : tensor<4xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<4xf32>) outs(%0 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %2 = arith.addf %in, %in : f32
    linalg.yield %2 : f32
  } -> tensor<4xf32>
  return %1, %1, %arg0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

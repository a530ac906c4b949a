// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-reassociate-reductions))" | FileCheck %s

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
// Only the accumulation gets the flag: exp keeps strict semantics.
// CHECK-LABEL: func.func @sum_of_exp
// CHECK: %[[E:.+]] = math.exp %{{.+}} : f32
// CHECK-NOT: fastmath
// CHECK: arith.addf %[[E]], %{{.+}} fastmath<reassoc> : f32
func.func @sum_of_exp(%arg0: tensor<4x8xf32>, %init: tensor<4xf32>) -> tensor<4xf32> {
  %0 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = math.exp %in : f32
    %2 = arith.addf %1, %out : f32
    linalg.yield %2 : f32
  } -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

#map = affine_map<(d0) -> (d0)>
// Elementwise ops and integer reductions are untouched.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: fastmath
func.func @untouched(%arg0: tensor<8xf32>, %arg1: tensor<8xi64>, %init: tensor<i64>) -> (tensor<8xf32>, tensor<i64>) {
  %e = tensor.empty() : tensor<8xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %out : f32
    linalg.yield %1 : f32
  } -> tensor<8xf32>
  %2 = linalg.generic {indexing_maps = [#map, affine_map<(d0) -> ()>], iterator_types = ["reduction"]} ins(%arg1 : tensor<8xi64>) outs(%init : tensor<i64>) {
  ^bb0(%in: i64, %out: i64):
    %3 = arith.addi %in, %out : i64
    linalg.yield %3 : i64
  } -> tensor<i64>
  return %0, %2 : tensor<8xf32>, tensor<i64>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
// A max reduction's combiner may return either zero on a tie (nsz); NaN
// semantics stay. An elementwise maximumf is untouched.
// CHECK-LABEL: func.func @row_max
// CHECK: arith.maximumf %{{.+}}, %{{.+}} : f32
// CHECK: arith.maximumf %{{.+}}, %{{.+}} fastmath<nsz> : f32
// CHECK: arith.minimumf %{{.+}}, %{{.+}} fastmath<nsz> : f32
func.func @row_max(%arg0: tensor<4x8xf32>, %init: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 1.0 : f32
    %1 = arith.maximumf %in, %c : f32
    %2 = arith.maximumf %1, %out : f32
    linalg.yield %2 : f32
  } -> tensor<4xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %4 = arith.minimumf %out, %in : f32
    linalg.yield %4 : f32
  } -> tensor<4xf32>
  return %0, %3 : tensor<4xf32>, tensor<4xf32>
}

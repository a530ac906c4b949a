// RUN: lazymlir-opt %s --split-input-file --lazymlir-readonly-arguments --lazymlir-donate-arguments | FileCheck %s --check-prefix=TENSOR
// RUN: lazymlir-opt %s --split-input-file --lazymlir-readonly-arguments --lazymlir-donate-arguments --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" --lazymlir-drop-donated-results | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --lazymlir-readonly-arguments --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" | FileCheck %s --check-prefix=PLAIN

// A step's parameter update: the new value (result 0) is written into the
// donated argument 0 itself, computed in place (the empty tensor it was
// computed into is the argument now); result 0 leaves the signature and the
// loss stays an out-value. Without donation (PLAIN) the update gets a
// buffer of its own and both values are alive.
// TENSOR-LABEL: func.func @main
// TENSOR-SAME: %arg0: tensor<64xf32> {bufferization.writable = true, lazymlir.donated_to = 0 : i64}
// TENSOR-SAME: -> (tensor<64xf32> {lazymlir.donated_from = 0 : i64}, tensor<f32>)
// TENSOR: %[[NEW:.*]] = linalg.generic {{.*}} outs(%arg0 : tensor<64xf32>)
// TENSOR: %[[M:.*]] = bufferization.materialize_in_destination %[[NEW]] in %arg0
// TENSOR: return %[[M]]
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: memref<64xf32> {lazymlir.donated}, %arg1: memref<64xf32>) -> memref<f32>
// CHECK-NOT: memref.alloc() {{.*}} : memref<64xf32>
// CHECK: linalg.generic {{.*}} ins(%arg0, %arg1 : memref<64xf32>, memref<64xf32>) outs(%arg0 : memref<64xf32>)
// CHECK-NOT: memref.copy
// CHECK: return %{{.*}} : memref<f32>
// PLAIN-LABEL: func.func @main
// PLAIN: memref.alloc() {{.*}} : memref<64xf32>
// PLAIN: return {{.*}} : memref<64xf32>, memref<f32>
#map = affine_map<(d0) -> (d0)>
#red = affine_map<(d0) -> ()>
func.func @main(%p: tensor<64xf32> {lazymlir.donated_to = 0 : i64}, %g: tensor<64xf32>) -> (tensor<64xf32>, tensor<f32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %lr = arith.constant 1.000000e-01 : f32
  %e0 = tensor.empty() : tensor<f32>
  %z = linalg.fill ins(%cst : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %loss = linalg.generic {indexing_maps = [#map, #red], iterator_types = ["reduction"]} ins(%p : tensor<64xf32>) outs(%z : tensor<f32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  %e = tensor.empty() : tensor<64xf32>
  %new = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%p, %g : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %b, %lr : f32
    %s = arith.subf %a, %m : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  return %new, %loss : tensor<64xf32>, tensor<f32>
}

// -----

// The old value is also returned (a clone torch-mlir lowers to the value
// itself) and read by an op after the update: the returned old value is
// copied before the argument is written, and the write is placed after the
// last read of the old value.
// TENSOR-LABEL: func.func @main
// TENSOR: %[[OLD:.*]] = linalg.copy ins(%arg0 : tensor<8xf32>)
// TENSOR: %[[NEW:.*]] = linalg.generic
// TENSOR: %[[LATE:.*]] = linalg.generic {{.*}} ins(%arg0 : tensor<8xf32>)
// TENSOR: %[[M:.*]] = bufferization.materialize_in_destination %[[NEW]] in %arg0
// TENSOR: return %[[M]], %[[OLD]], %[[LATE]]
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: memref<8xf32> {lazymlir.donated}) -> (memref<8xf32>, memref<8xf32>)
// CHECK: %[[OLD:.*]] = memref.alloc
// CHECK: linalg.copy ins(%arg0 : memref<8xf32>) outs(%[[OLD]] : memref<8xf32>)
// CHECK: linalg.generic {{.*}} ins(%arg0 : memref<8xf32>)
// CHECK: memref.copy {{.*}}, %arg0
// CHECK: return %[[OLD]], %{{.*}} : memref<8xf32>, memref<8xf32>
#map = affine_map<(d0) -> (d0)>
func.func @main(%p: tensor<8xf32> {lazymlir.donated_to = 0 : i64}) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %one = arith.constant 1.000000e+00 : f32
  %e = tensor.empty() : tensor<8xf32>
  %new = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%p : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %one : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8xf32>
  %late = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%p : tensor<8xf32>) outs(%e2 : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.mulf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %new, %p, %late : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}


// -----

// The update computed in one dimension (elementwise kernels collapsed) and
// expanded back: it is computed into the argument's collapsed view, the
// one it reads the old value through (no temporary, no copy; before, the
// elimination did not look through the reshapes: a 94 MB embedding's AdamW
// moments went through a temporary and a single-threaded copy each step).
// TENSOR-LABEL: func.func @main(%arg0: tensor<8x8xf32>
// TENSOR: %[[VIEW:.*]] = tensor.collapse_shape %arg0
// TENSOR: %[[NEW:.*]] = linalg.generic {{.*}} ins(%[[VIEW]], %{{.*}} : tensor<64xf32>, tensor<64xf32>) outs(%[[VIEW]] : tensor<64xf32>)
// TENSOR: %[[M:.*]] = bufferization.materialize_in_destination %[[NEW]] in %[[VIEW]]
// TENSOR: %[[BACK:.*]] = tensor.expand_shape %[[M]]
// TENSOR: return %[[BACK]]
// CHECK-LABEL: func.func @main(%arg0: memref<8x8xf32>
// CHECK-SAME: {lazymlir.donated}, %arg1: memref<8x8xf32>)
// CHECK-NOT: memref.alloc
// CHECK: %[[VIEW:.*]] = memref.collapse_shape %arg0
// CHECK: linalg.generic {{.*}} outs(%[[VIEW]] : memref<64xf32>)
// CHECK-NOT: memref.copy
// CHECK: return
#map = affine_map<(d0) -> (d0)>
func.func @main(%p: tensor<8x8xf32> {lazymlir.donated_to = 0 : i64}, %g: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %lr = arith.constant 1.000000e-01 : f32
  %p1 = tensor.collapse_shape %p [[0, 1]] : tensor<8x8xf32> into tensor<64xf32>
  %g1 = tensor.collapse_shape %g [[0, 1]] : tensor<8x8xf32> into tensor<64xf32>
  %e2 = tensor.empty() : tensor<8x8xf32>
  %e = tensor.collapse_shape %e2 [[0, 1]] : tensor<8x8xf32> into tensor<64xf32>
  %new = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%p1, %g1 : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %b, %lr : f32
    %s = arith.subf %a, %m : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  %r = tensor.expand_shape %new [[0, 1]] output_shape [8, 8] : tensor<64xf32> into tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// RUN: lazymlir-opt %s --lazymlir-readonly-arguments | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-readonly-arguments --one-shot-bufferize="bufferize-function-boundaries" | FileCheck %s --check-prefix=BUF
// RUN: lazymlir-opt %s --lazymlir-readonly-arguments=entry=helper | FileCheck %s --check-prefix=HELPER

// The entry's tensor arguments are the caller's tensors: marked not
// writable, one-shot bufferization writes into a copy instead of updating
// them in place (torch-mlir's slice_scatter is an insert_slice into its
// input; without the mark the input tensor itself was written).
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<8xf32> {bufferization.writable = false}
// CHECK-SAME: %arg1: tensor<2xf32> {bufferization.writable = false}
// BUF-LABEL: func.func @main
// BUF: %[[ALLOC:.*]] = memref.alloc() {{.*}} : memref<8xf32>
// BUF: memref.copy %arg0, %[[ALLOC]]
// BUF: %[[VIEW:.*]] = memref.subview %[[ALLOC]][0] [2] [1]
// BUF: memref.copy %arg1, %[[VIEW]]
// BUF: return %[[ALLOC]]
func.func @main(%arg0: tensor<8xf32>, %arg1: tensor<2xf32>) -> tensor<8xf32> {
  %0 = tensor.insert_slice %arg1 into %arg0[0] [2] [1] : tensor<2xf32> into tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Other functions are not the runtime's entry: untouched.
// CHECK-LABEL: func.func @helper
// CHECK-SAME: (%arg0: tensor<8xf32>)
// With entry=helper, the other way round.
// HELPER-LABEL: func.func @main
// HELPER-SAME: (%arg0: tensor<8xf32>, %arg1: tensor<2xf32>)
// HELPER-LABEL: func.func @helper
// HELPER-SAME: %arg0: tensor<8xf32> {bufferization.writable = false}
func.func @helper(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

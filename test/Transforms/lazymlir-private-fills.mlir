// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-private-fills))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-private-fills),one-shot-bufferize{bufferize-function-boundaries})" | FileCheck %s --check-prefix=BUF

// Two products accumulate into one CSE'd zero fill: each gets its own fill
// of its own empty tensor, so bufferization copies nothing.
// CHECK-LABEL: func.func @two_products
// CHECK: %[[E0:.+]] = tensor.empty() : tensor<16x32xf32>
// CHECK: %[[Z0:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[E0]] : tensor<16x32xf32>)
// CHECK: %[[E1:.+]] = tensor.empty() : tensor<16x32xf32>
// CHECK: %[[Z1:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[E1]] : tensor<16x32xf32>)
// CHECK: linalg.matmul ins(%arg0, %arg1 : tensor<16x8xf32>, tensor<8x32xf32>) outs(%[[Z1]] : tensor<16x32xf32>)
// CHECK: linalg.matmul ins(%arg0, %arg2 : tensor<16x8xf32>, tensor<8x32xf32>) outs(%[[Z0]] : tensor<16x32xf32>)
// BUF-LABEL: func.func @two_products
// BUF-NOT: memref.copy {{.*}} : memref<16x32xf32> to memref<16x32xf32>
// BUF: return
func.func @two_products(%a: tensor<16x8xf32>, %b: tensor<8x32xf32>, %c: tensor<8x32xf32>) -> (tensor<16x32xf32>, tensor<16x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x32xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<16x8xf32>, tensor<8x32xf32>) outs(%z : tensor<16x32xf32>) -> tensor<16x32xf32>
  %1 = linalg.matmul ins(%a, %c : tensor<16x8xf32>, tensor<8x32xf32>) outs(%z : tensor<16x32xf32>) -> tensor<16x32xf32>
  return %0, %1 : tensor<16x32xf32>, tensor<16x32xf32>
}

// -----

// The zeros are also returned (read): the original stays for that, and the
// product and the tile loop's initial value get clones.
// CHECK-LABEL: func.func @read_and_loop
// CHECK: %[[Z:.+]] = linalg.fill
// CHECK: %[[ZP:.+]] = linalg.fill
// CHECK: linalg.matmul {{.*}} outs(%[[ZP]] : tensor<16x32xf32>)
// CHECK: %[[ZL:.+]] = linalg.fill
// CHECK: scf.for {{.*}} iter_args(%{{.+}} = %[[ZL]])
// CHECK: return %[[Z]],
// BUF-LABEL: func.func @read_and_loop
// BUF-NOT: memref.copy {{.*}} : memref<16x32xf32> to memref<16x32xf32>
// BUF: return
func.func @read_and_loop(%a: tensor<16x8xf32>, %b: tensor<8x32xf32>) -> (tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %e = tensor.empty() : tensor<16x32xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<16x8xf32>, tensor<8x32xf32>) outs(%z : tensor<16x32xf32>) -> tensor<16x32xf32>
  %1 = scf.for %i = %c0 to %c16 step %c1 iter_args(%acc = %z) -> (tensor<16x32xf32>) {
    %row = tensor.extract_slice %0[%i, 0] [1, 32] [1, 1] : tensor<16x32xf32> to tensor<1x32xf32>
    %2 = tensor.insert_slice %row into %acc[%i, 0] [1, 32] [1, 1] : tensor<1x32xf32> into tensor<16x32xf32>
    scf.yield %2 : tensor<16x32xf32>
  }
  return %z, %0, %1 : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
}

// -----

// One destination: nothing changes.
// CHECK-LABEL: func.func @one_use
// CHECK-COUNT-1: linalg.fill
// CHECK-NOT: linalg.fill
func.func @one_use(%a: tensor<16x8xf32>, %b: tensor<8x32xf32>) -> tensor<16x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x32xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<16x8xf32>, tensor<8x32xf32>) outs(%z : tensor<16x32xf32>) -> tensor<16x32xf32>
  return %0 : tensor<16x32xf32>
}

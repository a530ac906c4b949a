// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-strided-copies-to-linalg))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-strided-copies-to-linalg,lazymlir-lower-to-loops{parallel-threshold=4096}))" | FileCheck %s --check-prefix=LOOPS

// A copy into a strided subview (a pad's interior) becomes a linalg.copy,
// which lazymlir-lower-to-loops lowers like any linalg op, parallel when
// large, instead of a call of the runtime's element-by-element memrefCopy;
// a contiguous copy stays a memcpy.
// CHECK-LABEL: func.func @pad_interior
// CHECK: %[[INTERIOR:.+]] = memref.subview
// CHECK-NEXT: linalg.copy ins(%{{.+}} : memref<64x64x24x24xf32>) outs(%[[INTERIOR]] : memref<64x64x24x24xf32, strided<[50176, 784, 28, 1], offset: 58>>)
// CHECK-NEXT: memref.copy %{{.+}}, %{{.+}} : memref<64xf32> to memref<64xf32>
// LOOPS-LABEL: func.func @pad_interior
// LOOPS-NOT: memref.copy
// LOOPS: scf.parallel
// LOOPS: memref.load %{{.+}} : memref<64x64x24x24xf32>
// LOOPS: memref.store %{{.+}} : memref<64x64x24x24xf32, strided<[50176, 784, 28, 1], offset: 58>>
// LOOPS: memref.copy %{{.+}}, %{{.+}} : memref<64xf32> to memref<64xf32>
func.func @pad_interior(%src: memref<64x64x24x24xf32>, %dst: memref<64x64x28x28xf32>, %a: memref<64xf32>, %b: memref<64xf32>) {
  %interior = memref.subview %dst[0, 0, 2, 2] [64, 64, 24, 24] [1, 1, 1, 1] : memref<64x64x28x28xf32> to memref<64x64x24x24xf32, strided<[50176, 784, 28, 1], offset: 58>>
  memref.copy %src, %interior : memref<64x64x24x24xf32> to memref<64x64x24x24xf32, strided<[50176, 784, 28, 1], offset: 58>>
  memref.copy %a, %b : memref<64xf32> to memref<64xf32>
  return
}

// -----

// A copy of dynamic (`?`) shape too (it was left to the runtime's
// element-by-element memrefCopy): a linalg.copy, lowered to loops.
// CHECK-LABEL: func.func @dynamic
// CHECK-NOT: memref.copy
// CHECK: linalg.copy ins(%{{.+}} : memref<?x24xf32>) outs(%{{.+}} : memref<?x24xf32, strided<[28, 1], offset: 2>>)
// CHECK-NOT: memref.copy
func.func @dynamic(%src: memref<?x24xf32>, %dst: memref<?x24xf32, strided<[28, 1], offset: 2>>) {
  memref.copy %src, %dst : memref<?x24xf32> to memref<?x24xf32, strided<[28, 1], offset: 2>>
  return
}

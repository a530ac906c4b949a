// RUN: lazymlir-opt %s --split-input-file --lazymlir-dynamic-expand-shapes --canonicalize | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --lazymlir-dynamic-expand-shapes --expand-strided-metadata | FileCheck %s --check-prefix=EXPANDED

// Batch x sequence rows viewed as [batch, sequence, 8]: one dimension into
// two `?` sizes, which expand-strided-metadata crashes on. A
// reinterpret_cast of the base buffer instead: strides [s * 8, 8, 1].
// CHECK-LABEL: func.func @rows_to_batch_sequence
// CHECK-SAME: (%[[SRC:.+]]: memref<?x8xf32>, %[[B:.+]]: index, %[[S:.+]]: index)
// CHECK: %[[STRIDE:.+]] = arith.muli %[[S]], %c8
// CHECK: %[[VIEW:.+]] = memref.reinterpret_cast %[[SRC]] to offset: [0], sizes: [%[[B]], %[[S]], 8], strides: [%[[STRIDE]], 8, 1]
// CHECK: %[[CAST:.+]] = memref.cast %[[VIEW]] : memref<?x?x8xf32, strided<[?, 8, 1]>> to memref<?x?x8xf32>
// CHECK-NOT: memref.expand_shape
// CHECK: return %[[CAST]] : memref<?x?x8xf32>
// EXPANDED-LABEL: func.func @rows_to_batch_sequence
// EXPANDED-NOT: memref.expand_shape
func.func @rows_to_batch_sequence(%src: memref<?x8xf32>, %b: index, %s: index) -> memref<?x?x8xf32> {
  %0 = memref.expand_shape %src [[0, 1], [2]] output_shape [%b, %s, 8] : memref<?x8xf32> into memref<?x?x8xf32>
  return %0 : memref<?x?x8xf32>
}

// -----

// One `?` size per group: left to expand-strided-metadata.
// CHECK-LABEL: func.func @one_dynamic
// CHECK: memref.expand_shape
func.func @one_dynamic(%src: memref<?x8xf32>, %b: index) -> memref<?x4x8xf32> {
  %0 = memref.expand_shape %src [[0, 1], [2]] output_shape [%b, 4, 8] : memref<?x8xf32> into memref<?x4x8xf32>
  return %0 : memref<?x4x8xf32>
}

// -----

// A strided source (a column block): its strides carry over.
// CHECK-LABEL: func.func @strided
// CHECK: %{{.+}}, %[[OFF:.+]], %{{.+}}, %{{.+}} = memref.extract_strided_metadata
// CHECK: %[[STRIDE:.+]] = arith.muli %{{.+}}, %c28
// CHECK: memref.reinterpret_cast %{{.+}} to offset: [%[[OFF]]], sizes: [%{{.+}}, %{{.+}}], strides: [%[[STRIDE]], 28]
func.func @strided(%src: memref<?xf32, strided<[28], offset: ?>>, %b: index, %s: index) -> memref<?x?xf32, strided<[?, 28], offset: ?>> {
  %0 = memref.expand_shape %src [[0, 1]] output_shape [%b, %s] : memref<?xf32, strided<[28], offset: ?>> into memref<?x?xf32, strided<[?, 28], offset: ?>>
  return %0 : memref<?x?xf32, strided<[?, 28], offset: ?>>
}

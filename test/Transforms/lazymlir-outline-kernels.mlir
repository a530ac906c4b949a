// RUN: lazymlir-opt %s --lazymlir-outline-kernels | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-outline-kernels --lazymlir-outline-kernels | FileCheck %s --check-prefix=TWICE
// RUN: lazymlir-opt %s --lazymlir-outline-kernels=entry=other | FileCheck %s --check-prefix=OTHER

// Two identical loop nests (over different buffers) become one kernel
// called twice; a third, different one, a kernel of its own. Constants are
// cloned into the kernel, the global is read in the entry and passed, and
// ops without loops stay in the entry.

memref.global "private" constant @weights : memref<4xf32> = dense<[1.0, 2.0, 3.0, 4.0]>

// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[A:.*]]: memref<4xf32>, %[[B:.*]]: memref<4xf32>, %[[C:.*]]: memref<4xf32>)
// CHECK:         call @[[ADD:__lazymlir_k_[0-9a-f]{32}]](%[[A]], %[[B]])
// CHECK:         call @[[ADD]](%[[B]], %[[C]])
// CHECK:         %[[W:.*]] = memref.get_global @weights
// CHECK:         call @[[MUL:__lazymlir_k_[0-9a-f]{32}]](%[[W]], %[[C]])
// CHECK-NOT:     scf.for
// CHECK:         memref.copy %[[A]], %[[C]]
// CHECK:         return

// Each kernel once, private, marked, with its constants inside.
// CHECK:       func.func private @[[ADD]](%{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>) attributes {lazymlir.kernel}
// CHECK-DAG:     arith.constant 0 : index
// CHECK-DAG:     arith.constant 4 : index
// CHECK:         scf.for
// CHECK:           arith.addf
// CHECK:       func.func private @[[MUL]](
// CHECK-NOT:     memref.get_global
// CHECK:         scf.for
// CHECK:           arith.mulf
// CHECK-NOT:   func.func private @__lazymlir_k_

// Outlining again finds no loop nest left in the entry.
// TWICE-COUNT-2: func.func private @__lazymlir_k_
// TWICE-NOT:     func.func private

// Only the entry's loop nests are outlined: none for an entry that does not
// exist.
// OTHER-NOT:     __lazymlir_k_

func.func @main(%a: memref<4xf32>, %b: memref<4xf32>, %c: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    %x = memref.load %a[%i] : memref<4xf32>
    %y = arith.addf %x, %x : f32
    memref.store %y, %b[%i] : memref<4xf32>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %x = memref.load %b[%i] : memref<4xf32>
    %y = arith.addf %x, %x : f32
    memref.store %y, %c[%i] : memref<4xf32>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %w = memref.get_global @weights : memref<4xf32>
    %x = memref.load %w[%i] : memref<4xf32>
    %y = arith.mulf %x, %x : f32
    memref.store %y, %c[%i] : memref<4xf32>
  }
  memref.copy %a, %c : memref<4xf32> to memref<4xf32>
  return
}

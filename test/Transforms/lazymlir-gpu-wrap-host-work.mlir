// RUN: lazymlir-opt %s --split-input-file --lazymlir-gpu-wrap-host-work -verify-diagnostics | FileCheck %s

// A full sum (an scf.for nest outside any parallel loop) and the scalar
// work on its result move into a one-iteration scf.parallel (a kernel of one
// thread); the allocation, the contiguous copy and the parallel loop stay
// host steps, in order.
// CHECK-LABEL: func.func @mean
// CHECK:       memref.alloc
// CHECK:       scf.parallel (%{{.*}}) = (%c0) to (%c8) step (%c1)
// CHECK:       memref.copy
// CHECK:       scf.parallel (%{{.*}}) = (%[[Z:.*]]) to (%[[O:.*]]) step (%[[O]])
// CHECK:         memref.store
// CHECK:         scf.for
// CHECK:         arith.divf
// CHECK:         memref.store
// CHECK:         scf.reduce
// CHECK:       return
func.func @mean(%x: memref<8xf32>, %y: memref<8xf32>, %out: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 8.0 : f32
  %t = memref.alloc() : memref<8xf32>
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    %v = memref.load %x[%i] : memref<8xf32>
    %w = arith.mulf %v, %v : f32
    memref.store %w, %t[%i] : memref<8xf32>
  }
  memref.copy %t, %y : memref<8xf32> to memref<8xf32>
  memref.store %zero, %out[] : memref<f32>
  scf.for %i = %c0 to %c8 step %c1 {
    %v = memref.load %t[%i] : memref<8xf32>
    %a = memref.load %out[] : memref<f32>
    %s = arith.addf %a, %v : f32
    memref.store %s, %out[] : memref<f32>
  }
  %sum = memref.load %out[] : memref<f32>
  %mean = arith.divf %sum, %n : f32
  memref.store %mean, %out[] : memref<f32>
  memref.dealloc %t : memref<8xf32>
  return
}

// -----

// A value read from memory that the host needs (a data-dependent view):
// left where it is, with a warning.
func.func @data_dependent_view(%x: memref<8xf32>, %i: memref<index>) -> memref<4xf32, strided<[1], offset: ?>> {
  // expected-warning @below {{stays on the host}}
  %o = memref.load %i[] : memref<index>
  %v = memref.subview %x[%o] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1], offset: ?>>
  return %v : memref<4xf32, strided<[1], offset: ?>>
}

// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-prefetch-row-tiles))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-prefetch-row-tiles{locality=-1}))" | FileCheck %s --check-prefix=OFF
// RUN: not lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-prefetch-row-tiles{locality=4}))" 2>&1 | FileCheck %s --check-prefix=BAD

// A softmax-like tile loop after lower-to-loops: tiles of 16 rows; a scalar
// pass (the row maxima), then the vectorized normalizing pass. Only the last
// pass that reads the tile's slice by vectors prefetches: each vector load
// gets the same element of the next tile, clamped to the input's last row.
// The mark is removed.
// CHECK-LABEL: func.func @softmax_tiles
// CHECK-DAG: %[[C16:.+]] = arith.constant 16 : index
// CHECK-DAG: %[[C1:.+]] = arith.constant 1 : index
// CHECK: scf.for %[[TILE:.+]] = %{{.+}} to %{{.+}} step %[[C16]] {
// CHECK: %[[X:.+]] = memref.subview %[[IN:.+]][%[[TILE]], 0] [16, 256] [1, 1]
// CHECK: scf.for
// CHECK-NOT: memref.prefetch
// CHECK: memref.load %[[X]]
// CHECK: scf.for %[[ROW:.+]] = %{{.+}} to %{{.+}} step %{{.+}} {
// CHECK: scf.for %[[COL:.+]] = %{{.+}} to %{{.+}} step %[[C16]] {
// CHECK: %[[NEXT:.+]] = arith.addi %[[TILE]], %[[C16]]
// CHECK: %[[R:.+]] = arith.addi %[[NEXT]], %[[ROW]]
// CHECK: %[[ROWS:.+]] = memref.dim %[[IN]], %{{.+}}
// CHECK: %[[LAST:.+]] = arith.subi %[[ROWS]], %[[C1]]
// CHECK: %[[CLAMPED:.+]] = arith.minui %[[R]], %[[LAST]]
// CHECK: %[[C:.+]] = arith.addi %{{.+}}, %[[COL]]
// CHECK: memref.prefetch %[[IN]][%[[CLAMPED]], %[[C]]], read, locality<3>, data
// CHECK-NEXT: vector.load %[[X]][%[[ROW]], %[[COL]]]
// CHECK-NOT: memref.prefetch
// CHECK: }
// CHECK-NOT: lazymlir.row_tiles
// CHECK: return
// OFF-LABEL: func.func @softmax_tiles
// OFF-NOT: memref.prefetch
// OFF-NOT: lazymlir.row_tiles
// BAD: error: lazymlir-prefetch-row-tiles: locality must be -1 (no prefetches) or 0-3, not 4
func.func @softmax_tiles(%in: memref<512x256xf32>, %out: memref<512x256xf32>, %max: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c256 = arith.constant 256 : index
  %c512 = arith.constant 512 : index
  scf.for %t = %c0 to %c512 step %c16 {
    %x = memref.subview %in[%t, 0] [16, 256] [1, 1] : memref<512x256xf32> to memref<16x256xf32, strided<[256, 1], offset: ?>>
    %y = memref.subview %out[%t, 0] [16, 256] [1, 1] : memref<512x256xf32> to memref<16x256xf32, strided<[256, 1], offset: ?>>
    scf.for %r = %c0 to %c16 step %c1 {
      scf.for %c = %c0 to %c256 step %c1 {
        %v = memref.load %x[%r, %c] : memref<16x256xf32, strided<[256, 1], offset: ?>>
        %m = memref.load %max[%r] : memref<16xf32>
        %n = arith.maximumf %v, %m : f32
        memref.store %n, %max[%r] : memref<16xf32>
      }
    }
    scf.for %r = %c0 to %c16 step %c1 {
      scf.for %c = %c0 to %c256 step %c16 {
        %v = vector.load %x[%r, %c] : memref<16x256xf32, strided<[256, 1], offset: ?>>, vector<16xf32>
        %m = memref.load %max[%r] : memref<16xf32>
        %b = vector.broadcast %m : f32 to vector<16xf32>
        %d = arith.subf %v, %b : vector<16xf32>
        vector.store %d, %y[%r, %c] : memref<16x256xf32, strided<[256, 1], offset: ?>>, vector<16xf32>
      }
    }
  } {lazymlir.row_tiles}
  return
}

// -----

// Without the mark (a loop fuse-row-reductions did not make), narrow vectors
// (one prefetch per cache line is enough: 4 bytes here) and slices whose
// rows do not follow the loop: no prefetches.
// CHECK-LABEL: func.func @no_prefetch
// CHECK-NOT: memref.prefetch
// CHECK: return
func.func @no_prefetch(%in: memref<512x256xf32>, %out: memref<512x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c256 = arith.constant 256 : index
  %c512 = arith.constant 512 : index
  scf.for %t = %c0 to %c512 step %c16 {
    %x = memref.subview %in[%t, 0] [16, 256] [1, 1] : memref<512x256xf32> to memref<16x256xf32, strided<[256, 1], offset: ?>>
    %y = memref.subview %out[%t, 0] [16, 256] [1, 1] : memref<512x256xf32> to memref<16x256xf32, strided<[256, 1], offset: ?>>
    scf.for %r = %c0 to %c16 step %c1 {
      scf.for %c = %c0 to %c256 step %c16 {
        %v = vector.load %x[%r, %c] : memref<16x256xf32, strided<[256, 1], offset: ?>>, vector<16xf32>
        vector.store %v, %y[%r, %c] : memref<16x256xf32, strided<[256, 1], offset: ?>>, vector<16xf32>
      }
    }
  }
  scf.for %t = %c0 to %c512 step %c16 {
    %x = memref.subview %in[%t, 0] [16, 256] [1, 1] : memref<512x256xf32> to memref<16x256xf32, strided<[256, 1], offset: ?>>
    %y = memref.subview %out[%t, 0] [16, 256] [1, 1] : memref<512x256xf32> to memref<16x256xf32, strided<[256, 1], offset: ?>>
    scf.for %r = %c0 to %c16 step %c1 {
      scf.for %c = %c0 to %c256 step %c1 {
        %v = vector.load %x[%r, %c] : memref<16x256xf32, strided<[256, 1], offset: ?>>, vector<1xf32>
        vector.store %v, %y[%r, %c] : memref<16x256xf32, strided<[256, 1], offset: ?>>, vector<1xf32>
      }
    }
  } {lazymlir.row_tiles}
  scf.for %t = %c0 to %c512 step %c16 {
    %x = memref.subview %in[0, %t] [16, 16] [1, 1] : memref<512x256xf32> to memref<16x16xf32, strided<[256, 1], offset: ?>>
    %y = memref.subview %out[0, %t] [16, 16] [1, 1] : memref<512x256xf32> to memref<16x16xf32, strided<[256, 1], offset: ?>>
    scf.for %r = %c0 to %c16 step %c1 {
      %v = vector.load %x[%r, %c0] : memref<16x16xf32, strided<[256, 1], offset: ?>>, vector<16xf32>
      vector.store %v, %y[%r, %c0] : memref<16x16xf32, strided<[256, 1], offset: ?>>, vector<16xf32>
    }
  } {lazymlir.row_tiles}
  return
}

// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-parallelize-tiles{parallel-threshold=4096}))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-parallelize-tiles))" | FileCheck %s --check-prefix=SEQ

// The tile bodies keep their linalg ops here: in the CPU pipeline this pass
// runs after lazymlir-lower-to-loops, but it only looks at the tile loops.

// Tile loops of a contraction (marked by lazymlir-tile-contractions with its
// size): 8x4 tiles write disjoint parts of the output, so both loops become
// one parallel loop, and the mark is gone.
// CHECK-LABEL: func.func @tiles
// CHECK: scf.parallel (%[[I:.+]], %[[J:.+]]) = (%c0, %c0) to (%c64, %c128) step (%c8, %c32)
// CHECK-NEXT: %[[TILE:.+]] = memref.subview %{{.+}}[%[[I]], %[[J]]] [8, 32]
// CHECK-NEXT: linalg.fill ins(%{{.+}} : f32) outs(%[[TILE]] :
// CHECK: scf.reduce
// CHECK-NOT: lazymlir.parallel_tiles
// SEQ-LABEL: func.func @tiles
// SEQ-NOT: scf.parallel
// SEQ-NOT: lazymlir.parallel_tiles
func.func @tiles(%out: memref<64x128xf32>) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %cst = arith.constant 1.0 : f32
  scf.for %i = %c0 to %c64 step %c8 {
    scf.for %j = %c0 to %c128 step %c32 {
      %tile = memref.subview %out[%i, %j] [8, 32] [1, 1] : memref<64x128xf32> to memref<8x32xf32, strided<[128, 1], offset: ?>>
      linalg.fill ins(%cst : f32) outs(%tile : memref<8x32xf32, strided<[128, 1], offset: ?>>)
    } {lazymlir.parallel_tiles = 1048576 : i64}
  } {lazymlir.parallel_tiles = 1048576 : i64}
  return
}

// -----

// A stack scratch buffer used only inside the tile loops (hoisted out of them
// by buffer-loop-hoisting, promoted to the stack) would be shared by the
// threads: each iteration of the parallel loop allocates its own instead.
// CHECK-LABEL: func.func @stack_scratch
// CHECK-NOT: memref.alloca
// CHECK: scf.parallel
// CHECK-NEXT: %[[SCRATCH:.+]] = memref.alloc() : memref<8x32xf32>
// CHECK: linalg.fill ins(%{{.+}} : f32) outs(%[[SCRATCH]] :
// CHECK: memref.copy %[[SCRATCH]], %{{.+}}
// CHECK: memref.dealloc %[[SCRATCH]]
// CHECK-NEXT: scf.reduce
// CHECK-NOT: lazymlir.parallel_tiles
func.func @stack_scratch(%out: memref<64x128xf32>) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %cst = arith.constant 1.0 : f32
  %scratch = memref.alloca() : memref<8x32xf32>
  scf.for %i = %c0 to %c64 step %c8 {
    scf.for %j = %c0 to %c128 step %c32 {
      linalg.fill ins(%cst : f32) outs(%scratch : memref<8x32xf32>)
      %tile = memref.subview %out[%i, %j] [8, 32] [1, 1] : memref<64x128xf32> to memref<8x32xf32, strided<[128, 1], offset: ?>>
      memref.copy %scratch, %tile : memref<8x32xf32> to memref<8x32xf32, strided<[128, 1], offset: ?>>
    } {lazymlir.parallel_tiles = 1048576 : i64}
  } {lazymlir.parallel_tiles = 1048576 : i64}
  return
}

// -----

// Heap scratch (too large for the stack) the same: allocated and freed by
// each iteration; the free after the loops goes.
// CHECK-LABEL: func.func @heap_scratch
// CHECK: scf.parallel
// CHECK-NEXT: %[[SCRATCH:.+]] = memref.alloc() {alignment = 64 : i64} : memref<8x32xf32>
// CHECK: memref.dealloc %[[SCRATCH]]
// CHECK-NEXT: scf.reduce
// CHECK-NOT: memref.dealloc
// CHECK: return
func.func @heap_scratch(%out: memref<64x128xf32>) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %cst = arith.constant 1.0 : f32
  %scratch = memref.alloc() {alignment = 64 : i64} : memref<8x32xf32>
  scf.for %i = %c0 to %c64 step %c8 {
    scf.for %j = %c0 to %c128 step %c32 {
      linalg.fill ins(%cst : f32) outs(%scratch : memref<8x32xf32>)
      %tile = memref.subview %out[%i, %j] [8, 32] [1, 1] : memref<64x128xf32> to memref<8x32xf32, strided<[128, 1], offset: ?>>
      memref.copy %scratch, %tile : memref<8x32xf32> to memref<8x32xf32, strided<[128, 1], offset: ?>>
    } {lazymlir.parallel_tiles = 1048576 : i64}
  } {lazymlir.parallel_tiles = 1048576 : i64}
  memref.dealloc %scratch : memref<8x32xf32>
  return
}

// -----

// Scratch of a size known only at run time (a row tile's temporaries when
// the row length is `?`): its sizes are defined before the nest, so each
// iteration allocates its own too, and the loops run in parallel (they
// stayed sequential: every dynamic softmax / layer norm on one thread).
// CHECK-LABEL: func.func @dynamic_scratch
// CHECK-SAME: (%{{.+}}: memref<64x128xf32>, %[[N:.+]]: index)
// CHECK-NOT: memref.alloc
// CHECK: scf.parallel
// CHECK-NEXT: %[[S:.+]] = memref.alloc(%[[N]]) : memref<?x32xf32>
// CHECK-NEXT: linalg.fill {{.*}} outs(%[[S]] : memref<?x32xf32>)
// CHECK-NEXT: memref.dealloc %[[S]]
// CHECK-NOT: lazymlir.parallel_tiles
// SEQ-LABEL: func.func @dynamic_scratch
// SEQ-NOT: scf.parallel
func.func @dynamic_scratch(%out: memref<64x128xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %cst = arith.constant 1.0 : f32
  %scratch = memref.alloc(%n) : memref<?x32xf32>
  scf.for %i = %c0 to %c64 step %c8 {
    scf.for %j = %c0 to %c128 step %c32 {
      linalg.fill ins(%cst : f32) outs(%scratch : memref<?x32xf32>)
    } {lazymlir.parallel_tiles = 1048576 : i64}
  } {lazymlir.parallel_tiles = 1048576 : i64}
  memref.dealloc %scratch : memref<?x32xf32>
  return
}

// -----

// A contraction below the threshold keeps sequential tile loops.
// CHECK-LABEL: func.func @small_tiles
// CHECK-NOT: scf.parallel
func.func @small_tiles(%out: memref<64x128xf32>) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %cst = arith.constant 1.0 : f32
  scf.for %i = %c0 to %c64 step %c8 {
    %tile = memref.subview %out[%i, 0] [8, 128] [1, 1] : memref<64x128xf32> to memref<8x128xf32, strided<[128, 1], offset: ?>>
    linalg.fill ins(%cst : f32) outs(%tile : memref<8x128xf32, strided<[128, 1], offset: ?>>)
  } {lazymlir.parallel_tiles = 1024 : i64}
  return
}

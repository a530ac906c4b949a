// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-lower-to-loops{parallel-threshold=4096}))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-lower-to-loops))" | FileCheck %s --check-prefix=SEQ

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
// 64x128 points: large enough for a parallel loop over the rows; the
// reduction stays sequential inside it.
// CHECK-LABEL: func.func @row_sum
// CHECK: scf.parallel (%{{.+}}) =
// CHECK: scf.for
// CHECK-NOT: linalg.generic
// SEQ-LABEL: func.func @row_sum
// SEQ-NOT: scf.parallel
// SEQ: scf.for
func.func @row_sum(%arg0: memref<64x128xf32>, %arg1: memref<64xf32>) {
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<64x128xf32>) outs(%arg1 : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

#map = affine_map<(d0) -> (d0)>
// Small: sequential even with a threshold.
// CHECK-LABEL: func.func @small
// CHECK-NOT: scf.parallel
// CHECK: scf.for
func.func @small(%arg0: memref<64xf32>, %arg1: memref<64xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : memref<64xf32>) outs(%arg1 : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %in : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// Only the outer loops run in parallel, as few as give 64 iterations (8x16
// here); the inner loops stay sequential for LLVM to vectorize.
// CHECK-LABEL: func.func @outer_dims
// CHECK: scf.parallel (%[[I:.+]], %[[J:.+]]) = (%{{.+}}, %{{.+}}) to (%c8, %c16)
// CHECK-NEXT: scf.for %[[K:.+]] =
// CHECK-NEXT: scf.for %[[L:.+]] =
// CHECK-DAG: affine.apply #{{.+}}(%[[I]])
// CHECK-DAG: affine.apply #{{.+}}(%[[J]])
// CHECK: memref.store
// CHECK: scf.reduce
func.func @outer_dims(%arg0: memref<8x16x32x4xf32>, %arg1: memref<8x16x32x4xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg0 : memref<8x16x32x4xf32>) outs(%arg1 : memref<8x16x32x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.negf %in : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

#map = affine_map<(d0) -> (d0)>
// One loop: it is the parallel one.
// CHECK-LABEL: func.func @one_dim
// CHECK: scf.parallel
// CHECK-NOT: scf.for
func.func @one_dim(%arg0: memref<8192xf32>, %arg1: memref<8192xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : memref<8192xf32>) outs(%arg1 : memref<8192xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.negf %in : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
// The outer loop is a reduction: every iteration writes the whole output, so
// no loop runs in parallel.
// CHECK-LABEL: func.func @column_sum
// CHECK-NOT: scf.parallel
func.func @column_sum(%arg0: memref<128x64xf32>, %arg1: memref<64xf32>) {
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "parallel"]} ins(%arg0 : memref<128x64xf32>) outs(%arg1 : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// Tile loops of a contraction (marked by lazymlir-tile-contractions with its
// size): 8x4 tiles write disjoint parts of the output, so both loops become
// one parallel loop, and the mark is gone.
// CHECK-LABEL: func.func @tiles
// CHECK: scf.parallel (%[[I:.+]], %[[J:.+]]) = (%c0, %c0) to (%c64, %c128) step (%c8, %c32)
// CHECK-NEXT: %[[TILE:.+]] = memref.subview %{{.+}}[%[[I]], %[[J]]] [8, 32]
// CHECK: scf.for
// CHECK: memref.store %{{.+}}, %[[TILE]]
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
// CHECK: memref.load %[[SCRATCH]]
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

// Scratch of a size known only at run time: the loops stay sequential.
// CHECK-LABEL: func.func @dynamic_scratch
// CHECK-NOT: scf.parallel
// CHECK-NOT: lazymlir.parallel_tiles
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

// -----

// A copy into a strided subview (a pad's interior) becomes loops like any
// linalg op, parallel when large, instead of a call of the runtime's
// element-by-element memrefCopy; a contiguous copy stays a memcpy.
// CHECK-LABEL: func.func @pad_interior
// CHECK-NOT: memref.copy
// CHECK: scf.parallel
// CHECK: memref.load %{{.+}} : memref<64x64x24x24xf32>
// CHECK: memref.store %{{.+}} : memref<64x64x24x24xf32, strided<[50176, 784, 28, 1], offset: 58>>
// CHECK: memref.copy %{{.+}}, %{{.+}} : memref<64xf32> to memref<64xf32>
func.func @pad_interior(%src: memref<64x64x24x24xf32>, %dst: memref<64x64x28x28xf32>, %a: memref<64xf32>, %b: memref<64xf32>) {
  %interior = memref.subview %dst[0, 0, 2, 2] [64, 64, 24, 24] [1, 1, 1, 1] : memref<64x64x28x28xf32> to memref<64x64x24x24xf32, strided<[50176, 784, 28, 1], offset: 58>>
  memref.copy %src, %interior : memref<64x64x24x24xf32> to memref<64x64x24x24xf32, strided<[50176, 784, 28, 1], offset: 58>>
  memref.copy %a, %b : memref<64xf32> to memref<64xf32>
  return
}

// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-lower-to-loops{parallel-threshold=4096}))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-lower-to-loops))" | FileCheck %s --check-prefix=SEQ
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-lower-to-loops{vector-width=8}))" --mlir-print-local-scope | FileCheck %s --check-prefix=VEC

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
// One loop: the parallel loop takes blocks of 1024 iterations, each a
// countable loop of its own (the OpenMP loop itself, under a guided
// schedule, is not one LLVM can vectorize).
// CHECK-LABEL: func.func @one_dim
// CHECK-DAG: %[[N:.*]] = arith.constant 8192 : index
// CHECK-DAG: %[[B:.*]] = arith.constant 1024 : index
// CHECK: scf.parallel (%[[I:.*]]) = (%{{.*}}) to (%[[N]]) step (%[[B]])
// CHECK:   %[[E:.*]] = arith.addi %[[I]], %[[B]]
// CHECK:   %[[END:.*]] = arith.minsi %[[E]], %[[N]]
// CHECK:   scf.for %{{.*}} = %[[I]] to %[[END]] step
// CHECK:     arith.negf
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

// Tile loops (lazymlir.parallel_tiles) are lazymlir-parallelize-tiles'
// business: the linalg op inside is lowered, the tile loops stay sequential
// and keep their mark.
// CHECK-LABEL: func.func @tile_loops_left_alone
// CHECK-NOT: scf.parallel
// CHECK: scf.for
// CHECK: scf.for
// CHECK: memref.store
// CHECK: } {lazymlir.parallel_tiles = 1048576 : i64}
// CHECK: } {lazymlir.parallel_tiles = 1048576 : i64}
func.func @tile_loops_left_alone(%out: memref<64x128xf32>) {
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

#x = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#r = affine_map<(d0, d1, d2) -> (d0)>
// A reduction's innermost reduction loops carry the accumulator as a loop
// value: loaded once before them, stored once after (not a load and a
// store per element, which LLVM cannot keep in a register).
// CHECK-LABEL: func.func @row_sum_accumulator
// CHECK:       scf.for %[[I:.*]] =
// CHECK:         %[[INIT:.*]] = memref.load %arg1[%{{.*}}] : memref<8xf32>
// CHECK:         %[[SUM:.*]] = scf.for {{.*}} iter_args(%[[A:.*]] = %[[INIT]]) -> (f32)
// CHECK:           %[[IN:.*]] = scf.for {{.*}} iter_args(%[[B:.*]] = %[[A]]) -> (f32)
// CHECK-NOT:         memref.store
// CHECK:             %[[V:.*]] = memref.load %arg0
// CHECK:             %[[S:.*]] = arith.addf %[[V]], %[[B]]
// CHECK:             scf.yield %[[S]] : f32
// CHECK:           scf.yield %[[IN]] : f32
// CHECK:         memref.store %[[SUM]], %arg1[%{{.*}}] : memref<8xf32>
func.func @row_sum_accumulator(%x: memref<8x4x16xf32>, %out: memref<8xf32>) {
  linalg.generic {indexing_maps = [#x, #r], iterator_types = ["parallel", "reduction", "reduction"]} ins(%x : memref<8x4x16xf32>) outs(%out : memref<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  }
  return
}

// -----

#x = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
// The output is a view of the input's buffer: every element is loaded and
// stored in the loop, as written (the reads may see earlier writes).
// CHECK-LABEL: func.func @output_aliases_input
// CHECK:       scf.for
// CHECK:         scf.for
// CHECK-NOT:       iter_args
// CHECK:           memref.load
// CHECK:           memref.load
// CHECK:           memref.store
func.func @output_aliases_input(%x: memref<8x8xf32>) {
  %c0 = arith.constant 0 : index
  %col = memref.subview %x[0, 0] [8, 1] [1, 1] : memref<8x8xf32> to memref<8xf32, strided<[8]>>
  linalg.generic {indexing_maps = [#x, #r], iterator_types = ["parallel", "reduction"]} ins(%x : memref<8x8xf32>) outs(%col : memref<8xf32, strided<[8]>>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A dynamic (`?`) row count: the size is known at run time only, so the nest
// is built twice and the iteration points choose, parallel from the
// threshold on; without a threshold it stays sequential.
// CHECK-LABEL: func.func @dynamic_rows
// CHECK: %[[DIM:.+]] = memref.dim %arg0
// CHECK: %[[P:.+]] = arith.muli %{{.+}}, %c64
// CHECK: %[[LARGE:.+]] = arith.cmpi sge, %[[P]], %c4096
// CHECK: scf.if %[[LARGE]] {
// CHECK: scf.parallel (%{{.+}}) = (%{{.+}}) to (%[[DIM]])
// CHECK: scf.for
// CHECK: } else {
// CHECK: scf.for %{{.+}} = %{{.+}} to %[[DIM]]
// CHECK: scf.for
// SEQ-LABEL: func.func @dynamic_rows
// SEQ-NOT: scf.if
// SEQ-NOT: scf.parallel
// SEQ: return
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @dynamic_rows(%arg0: memref<?x64xf32>, %arg1: memref<?x64xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<?x64xf32>) outs(%arg1 : memref<?x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %in : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// A dynamic op inside a tile loop (a partial tile: at most a tile's worth)
// is not built twice: sequential loops only.
// CHECK-LABEL: func.func @dynamic_tile
// CHECK-NOT: scf.if
// CHECK-NOT: scf.parallel
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @dynamic_tile(%arg0: memref<?x64xf32>, %arg1: memref<?x64xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<?x64xf32>) outs(%arg1 : memref<?x64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.addf %in, %in : f32
      linalg.yield %0 : f32
    }
  }
  return
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>
// With vector-width, the innermost loop of an elementwise op whose operands
// read it contiguously or not at all (a bias broadcast along rows) asks LLVM
// for vectors of that width (its cost model kept erf's polynomial scalar);
// none without vector-width; none for a transposed read (a gather per
// lane), nor for a body that loads from memory itself (an embedding).
// VEC-LABEL: func.func @vectorized_epilogue
// VEC: scf.for
// VEC: math.erf
// VEC: } {loop_annotation = #llvm.loop_annotation<vectorize = <disable = false, width = 8 : i32>>}
// SEQ-LABEL: func.func @vectorized_epilogue
// SEQ-NOT: loop_annotation
// SEQ: return
func.func @vectorized_epilogue(%x: memref<64x256xf32>, %b: memref<256xf32>, %o: memref<64x256xf32>) {
  linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %b : memref<64x256xf32>, memref<256xf32>) outs(%o : memref<64x256xf32>) {
  ^bb0(%in: f32, %bias: f32, %out: f32):
    %0 = arith.addf %in, %bias : f32
    %1 = math.erf %0 : f32
    linalg.yield %1 : f32
  }
  return
}
// VEC-LABEL: func.func @transposed_read
// VEC-NOT: loop_annotation
// VEC: return
func.func @transposed_read(%x: memref<256x64xf32>, %o: memref<64x256xf32>) {
  linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]} ins(%x : memref<256x64xf32>) outs(%o : memref<64x256xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.erf %in : f32
    linalg.yield %0 : f32
  }
  return
}
// VEC-LABEL: func.func @gather_in_body
// VEC-NOT: loop_annotation
// VEC: return
func.func @gather_in_body(%ids: memref<64xindex>, %table: memref<1000x256xf32>, %o: memref<64x256xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, #id], iterator_types = ["parallel", "parallel"]} ins(%ids : memref<64xindex>) outs(%o : memref<64x256xf32>) {
  ^bb0(%id: index, %out: f32):
    %j = linalg.index 1 : index
    %0 = memref.load %table[%id, %j] : memref<1000x256xf32>
    linalg.yield %0 : f32
  }
  return
}

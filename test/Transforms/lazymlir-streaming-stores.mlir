// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-streaming-stores{min-bytes=65536 parallel-threshold=4096}))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-streaming-stores{min-bytes=65536}))" | FileCheck %s --check-prefix=SEQ
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-streaming-stores{parallel-threshold=4096}))" | FileCheck %s --check-prefix=OFF
// RUN: lazymlir-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(func.func(lazymlir-streaming-stores{min-bytes=65536}))" -o /dev/null
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-streaming-stores{min-bytes=65536 parallel-threshold=4096},lazymlir-lower-to-loops{parallel-threshold=4096}))" | FileCheck %s --check-prefix=LOWERED

// A large elementwise kernel: when the output is 64-byte aligned, a vector
// nest (16 x f32 per iteration, rows in parallel) with aligned non-temporal
// stores; the row-broadcast input is a scalar load, broadcast; otherwise the
// linalg op, which lazymlir-lower-to-loops lowers as usual. Without a
// parallel threshold the vector nest is sequential; with the default
// min-bytes (16 MiB) nothing here streams.
// CHECK-LABEL: func.func @row_bias_sqrt
// CHECK: %[[ADDRESS:.+]] = memref.extract_aligned_pointer_as_index %[[OUT:.+]] :
// CHECK: %[[REM:.+]] = arith.remui %[[ADDRESS]], %{{.+}} : index
// CHECK: %[[ALIGNED:.+]] = arith.cmpi eq, %[[REM]], %{{.+}} : index
// CHECK: scf.if %[[ALIGNED]] {
// CHECK: %[[C16:.+]] = arith.constant 16 : index
// CHECK: scf.parallel (%[[ROW:.+]]) =
// CHECK: scf.for %[[COL:.+]] = %{{.+}} to %{{.+}} step %[[C16]] {
// CHECK: vector.load %{{.+}}[%[[ROW]], %[[COL]]] : memref<256x1024xf32>, vector<16xf32>
// CHECK: memref.load %{{.+}}[%[[ROW]]] : memref<256xf32>
// CHECK: math.sqrt %{{.+}} : vector<16xf32>
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[ROW]], %[[COL]]] {alignment = 64 : i64, nontemporal = true} : memref<256x1024xf32>, vector<16xf32>
// CHECK: } else {
// CHECK-NEXT: linalg.generic
// CHECK-SAME: outs(%[[OUT]] : memref<256x1024xf32>)
// SEQ-LABEL: func.func @row_bias_sqrt
// SEQ: scf.if
// SEQ-NOT: scf.parallel
// SEQ: vector.store {{.*}}nontemporal = true
// SEQ: } else {
// LOWERED-LABEL: func.func @row_bias_sqrt
// LOWERED: scf.if
// LOWERED: scf.parallel
// LOWERED: vector.store {{.*}}nontemporal = true
// LOWERED: } else {
// LOWERED: scf.parallel
// LOWERED: memref.store
// LOWERED-NOT: linalg.generic
// OFF-LABEL: func.func @row_bias_sqrt
// OFF-NOT: scf.if
// OFF-NOT: nontemporal
#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @row_bias_sqrt(%a: memref<256x1024xf32>, %b: memref<256xf32>, %out: memref<256x1024xf32>) {
  %c = arith.constant 2.0 : f32
  linalg.generic {indexing_maps = [#map, #row, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : memref<256x1024xf32>, memref<256xf32>) outs(%out : memref<256x1024xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %0 = arith.mulf %x, %c : f32
    %1 = arith.addf %0, %y : f32
    %2 = math.sqrt %1 : f32
    linalg.yield %2 : f32
  }
  return
}

// -----

// f64: 8 elements per 64-byte store; the only loop is parallel, in blocks
// of 64 stores (512 elements), each block a countable loop of its own (the
// OpenMP loop itself would reload its bound after every store).
// CHECK-LABEL: func.func @relu_f64
// CHECK: scf.if
// CHECK-DAG: %[[N:.+]] = arith.constant 16384 : index
// CHECK-DAG: %[[C8:.+]] = arith.constant 8 : index
// CHECK-DAG: %[[C512:.+]] = arith.constant 512 : index
// CHECK: scf.parallel (%[[B:.+]]) = (%{{.+}}) to (%[[N]]) step (%[[C512]])
// CHECK: %[[NEXT:.+]] = arith.addi %[[B]], %[[C512]] : index
// CHECK: %[[END:.+]] = arith.minsi %[[NEXT]], %[[N]] : index
// CHECK: scf.for %[[I:.+]] = %[[B]] to %[[END]] step %[[C8]]
// CHECK: arith.maximumf %{{.+}}, %{{.+}} : vector<8xf64>
// CHECK: vector.store %{{.+}}[%[[I]]] {alignment = 64 : i64, nontemporal = true} : memref<16384xf64>, vector<8xf64>
#id = affine_map<(d0) -> (d0)>
func.func @relu_f64(%a: memref<16384xf64>, %out: memref<16384xf64>) {
  %zero = arith.constant 0.0 : f64
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%a : memref<16384xf64>) outs(%out : memref<16384xf64>) {
  ^bb0(%x: f64, %o: f64):
    %0 = arith.maximumf %x, %zero : f64
    linalg.yield %0 : f64
  }
  return
}

// -----

// An in-place update (the output is also read: a donated optimizer moment)
// gets the vector loop with plain stores: a non-temporal store to the line
// just read would send it to memory a second time.
// CHECK-LABEL: func.func @in_place
// CHECK: scf.if
// CHECK: scf.parallel
// CHECK: %[[OLD:.+]] = vector.load %[[M:.+]][%[[I:.+]]] : memref<16384xf32>, vector<16xf32>
// CHECK: vector.store %{{.+}}, %[[M]][%[[I]]] {alignment = 64 : i64} : memref<16384xf32>, vector<16xf32>
#in_place = affine_map<(d0) -> (d0)>
func.func @in_place(%m: memref<16384xf32>, %g: memref<16384xf32>) {
  %beta = arith.constant 0.9 : f32
  linalg.generic {indexing_maps = [#in_place, #in_place, #in_place], iterator_types = ["parallel"]} ins(%m, %g : memref<16384xf32>, memref<16384xf32>) outs(%m : memref<16384xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %0 = arith.mulf %x, %beta : f32
    %1 = arith.addf %0, %y : f32
    linalg.yield %1 : f32
  }
  return
}

// -----

// Two outputs (a fused op keeping its producer's result, as an AdamW update
// keeps both moments): one aligned check for both, each stored by the same
// vectors, the one updated in place with plain stores.
// CHECK-LABEL: func.func @two_outputs
// CHECK: %[[A:.+]] = arith.cmpi eq
// CHECK: %[[B:.+]] = arith.cmpi eq
// CHECK: %[[BOTH:.+]] = arith.andi %[[A]], %[[B]] : i1
// CHECK: scf.if %[[BOTH]]
// CHECK: scf.parallel
// CHECK: vector.store %{{.+}}, %[[M:.+]][%[[I:.+]]] {alignment = 64 : i64} : memref<16384xf32>, vector<16xf32>
// CHECK: vector.store %{{.+}}, %{{.+}}[%[[I]]] {alignment = 64 : i64, nontemporal = true} : memref<16384xf32>, vector<16xf32>
#two = affine_map<(d0) -> (d0)>
func.func @two_outputs(%m: memref<16384xf32>, %g: memref<16384xf32>, %out: memref<16384xf32>) {
  %beta = arith.constant 0.9 : f32
  linalg.generic {indexing_maps = [#two, #two, #two, #two], iterator_types = ["parallel"]} ins(%m, %g : memref<16384xf32>, memref<16384xf32>) outs(%m, %out : memref<16384xf32>, memref<16384xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32, %p: f32):
    %0 = arith.mulf %x, %beta : f32
    %1 = arith.addf %0, %y : f32
    %2 = arith.mulf %1, %1 : f32
    linalg.yield %1, %2 : f32, f32
  }
  return
}

// -----

// Not streamed: an innermost size 16 does not divide; an output that is also
// read; an input strided along the innermost loop (transposed); an output
// smaller than the option; i1 memory.
// CHECK-LABEL: func.func @not_streamed
// CHECK-NOT: nontemporal
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
#transposed = affine_map<(d0, d1) -> (d1, d0)>
#id = affine_map<(d0) -> (d0)>
func.func @not_streamed(%a: memref<128x1000xf32>, %o1: memref<128x1000xf32>,
                        %b: memref<128x1024xf32>, %o2: memref<128x1024xf32>,
                        %t: memref<1024x128xf32>, %o3: memref<128x1024xf32>,
                        %s: memref<1024xf32>, %o4: memref<1024xf32>,
                        %m: memref<131072xi1>, %o5: memref<131072xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%a : memref<128x1000xf32>) outs(%o1 : memref<128x1000xf32>) {
  ^bb0(%x: f32, %o: f32):
    %0 = arith.negf %x : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%b : memref<128x1024xf32>) outs(%o2 : memref<128x1024xf32>) {
  ^bb0(%x: f32, %o: f32):
    %0 = arith.addf %x, %o : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#transposed, #map], iterator_types = ["parallel", "parallel"]} ins(%t : memref<1024x128xf32>) outs(%o3 : memref<128x1024xf32>) {
  ^bb0(%x: f32, %o: f32):
    %0 = arith.negf %x : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%s : memref<1024xf32>) outs(%o4 : memref<1024xf32>) {
  ^bb0(%x: f32, %o: f32):
    %0 = arith.negf %x : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%m : memref<131072xi1>) outs(%o5 : memref<131072xf32>) {
  ^bb0(%x: i1, %o: f32):
    %0 = arith.uitofp %x : i1 to f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// A tile loop (lazymlir.parallel_tiles, as lazymlir-fuse-row-reductions
// makes for softmax) writing row tiles of a large output: each tile streams
// when it starts 64-byte aligned (the buffer's aligned pointer plus the
// tile's offset in bytes); its input is a strided tile too.
// CHECK-LABEL: func.func @row_tiles
// CHECK: scf.for %[[TILE:.+]] =
// CHECK: memref.subview %{{.+}}[%[[TILE]], 0] [16, 1024] [1, 1]
// CHECK: %[[TILE_OUT:.+]] = memref.subview %{{.+}}[%[[TILE]], 0] [16, 1024] [1, 1]
// CHECK: %[[BASE:.+]] = memref.extract_aligned_pointer_as_index %[[TILE_OUT]]
// CHECK: %{{.+}}, %[[OFFSET:.+]], %{{.+}}:2, %{{.+}}:2 = memref.extract_strided_metadata %[[TILE_OUT]]
// CHECK: %[[BYTES:.+]] = arith.muli %[[OFFSET]], %{{.+}} : index
// CHECK: %[[START:.+]] = arith.addi %[[BASE]], %[[BYTES]] : index
// CHECK: arith.remui %[[START]], %{{.+}} : index
// CHECK: scf.if
// CHECK: vector.load %{{.+}} : memref<16x1024xf32, strided<[1024, 1], offset: ?>>, vector<16xf32>
// CHECK: vector.store %{{.+}}, %[[TILE_OUT]][%{{.+}}, %{{.+}}] {alignment = 64 : i64, nontemporal = true} : memref<16x1024xf32, strided<[1024, 1], offset: ?>>, vector<16xf32>
// CHECK: } else {
// CHECK-NEXT: linalg.generic
// CHECK: } {lazymlir.parallel_tiles = 262144 : i64}
// OFF-LABEL: func.func @row_tiles
// OFF-NOT: nontemporal
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @row_tiles(%a: memref<256x1024xf32>, %out: memref<256x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c256 = arith.constant 256 : index
  scf.for %i = %c0 to %c256 step %c16 {
    %in = memref.subview %a[%i, 0] [16, 1024] [1, 1] : memref<256x1024xf32> to memref<16x1024xf32, strided<[1024, 1], offset: ?>>
    %o = memref.subview %out[%i, 0] [16, 1024] [1, 1] : memref<256x1024xf32> to memref<16x1024xf32, strided<[1024, 1], offset: ?>>
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%in : memref<16x1024xf32, strided<[1024, 1], offset: ?>>) outs(%o : memref<16x1024xf32, strided<[1024, 1], offset: ?>>) {
    ^bb0(%x: f32, %y: f32):
      %0 = math.sqrt %x : f32
      linalg.yield %0 : f32
    }
  } {lazymlir.parallel_tiles = 262144 : i64}
  return
}

// -----

// The same tiles outside a tile loop, and tiles whose rows are not a
// multiple of 64 bytes apart (1028 floats), keep regular stores.
// CHECK-LABEL: func.func @not_row_tiles
// CHECK-NOT: nontemporal
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @not_row_tiles(%a: memref<256x1024xf32>, %out: memref<256x1024xf32>, %b: memref<256x1028xf32>, %out2: memref<256x1028xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c256 = arith.constant 256 : index
  scf.for %i = %c0 to %c256 step %c16 {
    %in = memref.subview %a[%i, 0] [16, 1024] [1, 1] : memref<256x1024xf32> to memref<16x1024xf32, strided<[1024, 1], offset: ?>>
    %o = memref.subview %out[%i, 0] [16, 1024] [1, 1] : memref<256x1024xf32> to memref<16x1024xf32, strided<[1024, 1], offset: ?>>
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%in : memref<16x1024xf32, strided<[1024, 1], offset: ?>>) outs(%o : memref<16x1024xf32, strided<[1024, 1], offset: ?>>) {
    ^bb0(%x: f32, %y: f32):
      %0 = math.sqrt %x : f32
      linalg.yield %0 : f32
    }
  }
  scf.for %i = %c0 to %c256 step %c16 {
    %in = memref.subview %b[%i, 0] [16, 1024] [1, 1] : memref<256x1028xf32> to memref<16x1024xf32, strided<[1028, 1], offset: ?>>
    %o = memref.subview %out2[%i, 0] [16, 1024] [1, 1] : memref<256x1028xf32> to memref<16x1024xf32, strided<[1028, 1], offset: ?>>
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%in : memref<16x1024xf32, strided<[1028, 1], offset: ?>>) outs(%o : memref<16x1024xf32, strided<[1028, 1], offset: ?>>) {
    ^bb0(%x: f32, %y: f32):
      %0 = math.sqrt %x : f32
      linalg.yield %0 : f32
    }
  } {lazymlir.parallel_tiles = 263168 : i64}
  return
}

// -----

// The scalar llvm.intr.ldexp of lazymlir-approximate-math's exp (the LLVM
// dialect's op takes no vectors) streams as a call of the overloaded
// intrinsic on vectors.
// CHECK-LABEL: func.func @scale_by_power_of_two
// CHECK: scf.if
// CHECK: %[[N:.+]] = arith.fptosi %{{.+}} : vector<16xf32> to vector<16xi32>
// CHECK: llvm.call_intrinsic "llvm.ldexp"(%{{.+}}, %[[N]]) : (vector<16xf32>, vector<16xi32>) -> vector<16xf32>
// CHECK: vector.store %{{.+}} {alignment = 64 : i64, nontemporal = true}
// CHECK: } else {
// CHECK: llvm.intr.ldexp(%{{.+}}, %{{.+}}) : (f32, i32) -> f32
#flat = affine_map<(d0) -> (d0)>
func.func @scale_by_power_of_two(%a: memref<32768xf32>, %out: memref<32768xf32>) {
  linalg.generic {indexing_maps = [#flat, #flat], iterator_types = ["parallel"]} ins(%a : memref<32768xf32>) outs(%out : memref<32768xf32>) {
  ^bb0(%x: f32, %o: f32):
    %n = arith.fptosi %x : f32 to i32
    %0 = llvm.intr.ldexp(%x, %n) : (f32, i32) -> f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// Too few images for one parallel loop: the image and row loops become one
// 2-D scf.parallel, whose bounds are defined above it (they were built
// inside the image loop once: a dominance error that failed causal
// attention's compile at sequence length 1024).
// CHECK-LABEL: func.func @two_images
// CHECK: scf.if
// CHECK: scf.parallel (%[[IMAGE:.+]], %[[ROW:.+]]) = (%{{.+}}, %{{.+}}) to (%{{.+}}, %{{.+}})
// CHECK: vector.store %{{.+}}, %{{.+}}[%[[IMAGE]], %[[ROW]], %{{.+}}] {alignment = 64 : i64, nontemporal = true}
func.func @two_images(%x: memref<2x32x1024xf32>, %out: memref<2x32x1024xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : memref<2x32x1024xf32>) outs(%out : memref<2x32x1024xf32>) {
  ^bb0(%in: f32, %o: f32):
    %s = math.sqrt %in : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A dynamic (`?`) output: its size is known at run time only, so its
// stores are not streamed, and the pass says so.
// CHECK-LABEL: func.func @dynamic
// CHECK-NOT: nontemporal
// CHECK: linalg.generic
func.func @dynamic(%a: memref<?x1024xf32>, %out: memref<?x1024xf32>) {
  // expected-remark @below {{lazymlir-streaming-stores: stores not streamed: dynamic dimension (output size unknown)}}
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : memref<?x1024xf32>) outs(%out : memref<?x1024xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  }
  return
}

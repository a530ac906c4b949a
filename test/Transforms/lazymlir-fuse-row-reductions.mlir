// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-fuse-row-reductions{tile-bytes=65536},canonicalize,cse))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-fuse-row-reductions,canonicalize,cse))" | FileCheck %s --check-prefix=TILE4K
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-fuse-row-reductions{runtime-gemms=1},canonicalize,cse))" | FileCheck %s --check-prefix=GEMM

// Softmax after lazymlir-fuse-elementwise: the row maxima, the row sums of
// exp(x - max) and the normalizing pass become one loop over tiles of 64 rows
// (64 KiB of input with tile-bytes=65536), the reductions and their fills
// inside it; nothing is left outside.
// CHECK-LABEL: func.func @softmax
// CHECK: %[[C64:.+]] = arith.constant 64 : index
// CHECK: scf.for %[[ROW:.+]] = %{{.+}} to %{{.+}} step %[[C64]]
// CHECK: %[[X:.+]] = tensor.extract_slice %{{.+}}[%[[ROW]], 0] [64, 256] [1, 1]
// CHECK: %[[FMAX:.+]] = linalg.fill {{.+}} -> tensor<64xf32>
// CHECK: %[[MAX:.+]] = linalg.generic {{.+}} ins(%[[X]] : tensor<64x256xf32>) outs(%[[FMAX]] : tensor<64xf32>)
// CHECK: arith.maximumf
// CHECK: %[[FSUM:.+]] = linalg.fill {{.+}} -> tensor<64xf32>
// CHECK: %[[SUM:.+]] = linalg.generic {{.+}} ins(%[[X]], %[[MAX]] : tensor<64x256xf32>, tensor<64xf32>) outs(%[[FSUM]] : tensor<64xf32>)
// CHECK: linalg.generic {{.+}} ins(%[[X]], %[[MAX]], %[[SUM]] : tensor<64x256xf32>, tensor<64xf32>, tensor<64xf32>)
// CHECK: tensor.insert_slice
// CHECK: } {lazymlir.parallel_tiles = 131072 : i64, lazymlir.row_tiles}
// CHECK-NOT: linalg.
// CHECK: return
// By default, 4 KiB of input per tile: tiles of 4 rows.
// TILE4K-LABEL: func.func @softmax
// TILE4K: scf.for %[[ROW:.+]] = %{{.+}} to %{{.+}} step %c4
// TILE4K: tensor.extract_slice %{{.+}}[%[[ROW]], 0] [4, 256] [1, 1]
// TILE4K: } {lazymlir.parallel_tiles = 131072 : i64, lazymlir.row_tiles}
#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @softmax(%x: tensor<512x256xf32>) -> tensor<512x256xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512xf32>
  %fmax = linalg.fill ins(%ninf : f32) outs(%e : tensor<512xf32>) -> tensor<512xf32>
  %max = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<512x256xf32>) outs(%fmax : tensor<512xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %m = arith.maximumf %in, %acc : f32
    linalg.yield %m : f32
  } -> tensor<512xf32>
  %fsum = linalg.fill ins(%zero : f32) outs(%e : tensor<512xf32>) -> tensor<512xf32>
  %sum = linalg.generic {indexing_maps = [#map, #row, #row], iterator_types = ["parallel", "reduction"]} ins(%x, %max : tensor<512x256xf32>, tensor<512xf32>) outs(%fsum : tensor<512xf32>) {
  ^bb0(%in: f32, %m: f32, %acc: f32):
    %d = arith.subf %in, %m : f32
    %ex = math.exp %d : f32
    %s = arith.addf %ex, %acc : f32
    linalg.yield %s : f32
  } -> tensor<512xf32>
  %o = tensor.empty() : tensor<512x256xf32>
  %r = linalg.generic {indexing_maps = [#map, #row, #row, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %max, %sum : tensor<512x256xf32>, tensor<512xf32>, tensor<512xf32>) outs(%o : tensor<512x256xf32>) {
  ^bb0(%in: f32, %m: f32, %s: f32, %out: f32):
    %d = arith.subf %in, %m : f32
    %ex = math.exp %d : f32
    %q = arith.divf %ex, %s : f32
    linalg.yield %q : f32
  } -> tensor<512x256xf32>
  return %r : tensor<512x256xf32>
}

// -----

// torch-mlir's keepdim form: the row sums are a 512x1 tensor indexed
// (d0, 0), which tiling cannot slice; unit dimensions are dropped first.
// CHECK-LABEL: func.func @keepdim_row_sum
// CHECK: scf.for
// CHECK: linalg.fill {{.+}} -> tensor<64xf32>
// CHECK: linalg.generic {{.+}} iterator_types = ["parallel", "reduction"]
// CHECK: linalg.generic {{.+}} iterator_types = ["parallel", "parallel"]
// CHECK: } {lazymlir.parallel_tiles
#map = affine_map<(d0, d1) -> (d0, d1)>
#keep = affine_map<(d0, d1) -> (d0, 0)>
func.func @keepdim_row_sum(%x: tensor<512x256xf32>) -> tensor<512x256xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512x1xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<512x1xf32>) -> tensor<512x1xf32>
  %sum = linalg.generic {indexing_maps = [#map, #keep], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<512x256xf32>) outs(%f : tensor<512x1xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<512x1xf32>
  %o = tensor.empty() : tensor<512x256xf32>
  %r = linalg.generic {indexing_maps = [#map, #keep, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %sum : tensor<512x256xf32>, tensor<512x1xf32>) outs(%o : tensor<512x256xf32>) {
  ^bb0(%in: f32, %s: f32, %out: f32):
    %q = arith.divf %in, %s : f32
    linalg.yield %q : f32
  } -> tensor<512x256xf32>
  return %r : tensor<512x256xf32>
}

// -----

// Not fused: a row sum that is also returned (fusing it would compute it
// twice), and a column sum (each row tile needs all of it).
// CHECK-LABEL: func.func @not_row_local
// CHECK-NOT: scf.for
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>
#colsum = affine_map<(d0, d1) -> (d0)>
#colin = affine_map<(d0, d1) -> (d1, d0)>
func.func @not_row_local(%x: tensor<512x256xf32>) -> (tensor<512x256xf32>, tensor<512xf32>, tensor<512x256xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<512xf32>) -> tensor<512xf32>
  %sum = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<512x256xf32>) outs(%f : tensor<512xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<512xf32>
  %o = tensor.empty() : tensor<512x256xf32>
  %r = linalg.generic {indexing_maps = [#map, #row, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %sum : tensor<512x256xf32>, tensor<512xf32>) outs(%o : tensor<512x256xf32>) {
  ^bb0(%in: f32, %s: f32, %out: f32):
    %q = arith.divf %in, %s : f32
    linalg.yield %q : f32
  } -> tensor<512x256xf32>
  %ec = tensor.empty() : tensor<256xf32>
  %fc = linalg.fill ins(%zero : f32) outs(%ec : tensor<256xf32>) -> tensor<256xf32>
  %csum = linalg.generic {indexing_maps = [#colin, #colsum], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<512x256xf32>) outs(%fc : tensor<256xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<256xf32>
  %r2 = linalg.generic {indexing_maps = [#map, #col, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %csum : tensor<512x256xf32>, tensor<256xf32>) outs(%o : tensor<512x256xf32>) {
  ^bb0(%in: f32, %s: f32, %out: f32):
    %q = arith.divf %in, %s : f32
    linalg.yield %q : f32
  } -> tensor<512x256xf32>
  return %r, %sum, %r2 : tensor<512x256xf32>, tensor<512xf32>, tensor<512x256xf32>
}

// -----

// A matmul (batch-first, as fuse-elementwise leaves a linear on a 3-D input)
// and its bias epilogue: the matmul reduces over its weight's rows, which no
// row tile owns; it is a contraction, not a row reduction, and stays out of
// any row loop (in one, its tiles raced between the loop's threads: GPT-2's
// layer norm + qkv projection gave nondeterministic results).
// CHECK-LABEL: func.func @matmul_is_not_a_row_reduction
// CHECK-NOT: scf.for
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel"]
// CHECK-NOT: scf.for
#mx = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#mw = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#mo = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#bias = affine_map<(d0, d1, d2) -> (d2)>
func.func @matmul_is_not_a_row_reduction(%x: tensor<4x64x128xf32>, %w: tensor<128x384xf32>, %b: tensor<384xf32>) -> tensor<4x64x384xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x64x384xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x64x384xf32>) -> tensor<4x64x384xf32>
  %mm = linalg.generic {indexing_maps = [#mx, #mw, #mo], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w : tensor<4x64x128xf32>, tensor<128x384xf32>) outs(%f : tensor<4x64x384xf32>) {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x64x384xf32>
  %e2 = tensor.empty() : tensor<4x64x384xf32>
  %r = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%mm, %b : tensor<4x64x384xf32>, tensor<384xf32>) outs(%e2 : tensor<4x64x384xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<4x64x384xf32>
  return %r : tensor<4x64x384xf32>
}

// -----

// A dynamic row count (batch x sequence): the same fusion, tiles of the rows
// that fit in tile-bytes (256 rows of 64 floats) over the rows that fill
// them, of static shape (their temporaries are static: allocated once per
// thread, and the tile loop can run in parallel), then the last partial
// tile (peeled). The tile loops are marked parallel with an unknown size.
// CHECK-LABEL: func.func @softmax_dynamic_rows
// CHECK: %[[DIM:.+]] = tensor.dim %arg0
// CHECK: %[[FULL:.+]] = affine.apply #{{.+}}()[%[[DIM]]]
// CHECK: scf.for %[[ROW:.+]] = %{{.+}} to %[[FULL]] step %c256
// CHECK: %[[X:.+]] = tensor.extract_slice %arg0[%[[ROW]], 0] [256, 64] [1, 1]
// CHECK: %[[MAX:.+]] = linalg.generic {{.+}} ins(%[[X]] : tensor<256x64xf32>)
// CHECK: %[[SUM:.+]] = linalg.generic {{.+}} ins(%[[X]], %[[MAX]] : tensor<256x64xf32>, tensor<256xf32>)
// CHECK: linalg.generic {{.+}} ins(%[[X]], %[[MAX]], %[[SUM]] :
// CHECK: } {lazymlir.parallel_tiles = 9223372036854775807 : i64, lazymlir.row_tiles}
// CHECK: scf.for %[[REST:.+]] = %[[FULL]] to %[[DIM]] step %c256
// CHECK: %[[N:.+]] = affine.apply #{{.+}}(%[[REST]])[%[[DIM]]]
// CHECK: tensor.extract_slice %arg0[%[[REST]], 0] [%[[N]], 64] [1, 1]
// CHECK: linalg.generic {{.+}} : tensor<?x64xf32>)
// CHECK: } {lazymlir.parallel_tiles = 9223372036854775807 : i64, lazymlir.row_tiles}
// CHECK-NOT: linalg.
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @softmax_dynamic_rows(%arg0: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %cst = arith.constant 0xFF800000 : f32
  %cst_0 = arith.constant 0.000000e+00 : f32
  %dim = tensor.dim %arg0, %c0 : tensor<?x64xf32>
  %0 = tensor.empty(%dim) : tensor<?xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<?xf32>) -> tensor<?xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<?x64xf32>) outs(%1 : tensor<?xf32>) {
  ^bb0(%in: f32, %out: f32):
    %7 = arith.maximumf %in, %out : f32
    linalg.yield %7 : f32
  } -> tensor<?xf32>
  %3 = linalg.fill ins(%cst_0 : f32) outs(%0 : tensor<?xf32>) -> tensor<?xf32>
  %4 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0, %2 : tensor<?x64xf32>, tensor<?xf32>) outs(%3 : tensor<?xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %7 = arith.subf %in, %in_1 : f32
    %8 = math.exp %7 : f32
    %9 = arith.addf %8, %out : f32
    linalg.yield %9 : f32
  } -> tensor<?xf32>
  %5 = tensor.empty(%dim) : tensor<?x64xf32>
  %6 = linalg.generic {indexing_maps = [#map, #map1, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %2, %4 : tensor<?x64xf32>, tensor<?xf32>, tensor<?xf32>) outs(%5 : tensor<?x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: f32, %out: f32):
    %7 = arith.subf %in, %in_1 : f32
    %8 = math.exp %7 : f32
    %9 = arith.divf %8, %in_2 : f32
    linalg.yield %9 : f32
  } -> tensor<?x64xf32>
  return %6 : tensor<?x64xf32>
}

// -----

// Attention's scores (a batched matmul whose batch is the row loop) and the
// row sums of exp over them: the matmul is row-local, so by default it runs
// in the sums' row loop, a slice per tile; with runtime-gemms (the CPU
// pipeline) it is one the runtime GEMM computes (batch 8 of 128x128x64) and
// stays whole, before the loop.
// CHECK-LABEL: func.func @scores_then_row_sums
// CHECK: scf.for
// CHECK: iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// CHECK: math.exp
// CHECK: lazymlir.row_tiles
// GEMM-LABEL: func.func @scores_then_row_sums
// GEMM: %[[S:.+]] = linalg.generic {{.+}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// GEMM-NEXT: ^bb0
// GEMM-NEXT: arith.mulf
// GEMM: scf.for
// GEMM: tensor.extract_slice %[[S]]
// GEMM-NOT: arith.mulf
// GEMM: math.exp
// GEMM: lazymlir.row_tiles
#q = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#k = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#s = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row2 = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @scores_then_row_sums(%q: tensor<8x128x64xf32>, %k: tensor<8x64x128xf32>) -> tensor<8x128x128xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x128x128xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x128x128xf32>) -> tensor<8x128x128xf32>
  %scores = linalg.generic {indexing_maps = [#q, #k, #s], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%q, %k : tensor<8x128x64xf32>, tensor<8x64x128xf32>) outs(%f : tensor<8x128x128xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x128x128xf32>
  %es = tensor.empty() : tensor<8x128xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<8x128xf32>) -> tensor<8x128xf32>
  %sum = linalg.generic {indexing_maps = [#id3, #row2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%scores : tensor<8x128x128xf32>) outs(%fs : tensor<8x128xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %ex = math.exp %in : f32
    %s = arith.addf %ex, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8x128xf32>
  %o = tensor.empty() : tensor<8x128x128xf32>
  %r = linalg.generic {indexing_maps = [#id3, #row2, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%scores, %sum : tensor<8x128x128xf32>, tensor<8x128xf32>) outs(%o : tensor<8x128x128xf32>) {
  ^bb0(%in: f32, %s: f32, %out: f32):
    %ex = math.exp %in : f32
    %d = arith.divf %ex, %s : f32
    linalg.yield %d : f32
  } -> tensor<8x128x128xf32>
  return %r : tensor<8x128x128xf32>
}

// -----

// bf16 attention's probabilities: the softmax's normalization rounded to bf16
// and widened back, read by a product the runtime GEMM computes. With
// runtime-gemms the normalization yields the bf16 values (so the row loop's
// result is bf16, which lazymlir-mark-gemms' bf16-operands hands to the bf16
// GEMM) and a separate widening follows, never itself a root; without it the
// loop yields the widened float32 values.
// GEMM-LABEL: func.func @rounded_probabilities
// GEMM:       %[[P:.+]] = scf.for {{.+}} -> (tensor<256x256xbf16>)
// GEMM:       arith.truncf {{.+}} : f32 to bf16
// GEMM:       } {lazymlir.parallel_tiles
// GEMM:       %[[W:.+]] = linalg.generic {{.+}} ins(%[[P]] : tensor<256x256xbf16>) outs(%{{.+}} : tensor<256x256xf32>)
// GEMM-NEXT:  ^bb0(%[[IN:.+]]: bf16, %{{.+}}: f32):
// GEMM-NEXT:  arith.extf %[[IN]] : bf16 to f32
// GEMM:       linalg.matmul ins(%[[W]], %{{.+}} : tensor<256x256xf32>, tensor<256x128xf32>)
// CHECK-LABEL: func.func @rounded_probabilities
// CHECK:       scf.for {{.+}} -> (tensor<256x256xf32>)
#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @rounded_probabilities(%x: tensor<256x256xf32>, %v: tensor<256x128xf32>) -> tensor<256x128xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256xf32>
  %fmax = linalg.fill ins(%ninf : f32) outs(%e : tensor<256xf32>) -> tensor<256xf32>
  %max = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<256x256xf32>) outs(%fmax : tensor<256xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %m = arith.maximumf %in, %acc : f32
    linalg.yield %m : f32
  } -> tensor<256xf32>
  %e2 = tensor.empty() : tensor<256x256xf32>
  %p = linalg.generic {indexing_maps = [#map, #row, #map], iterator_types = ["parallel", "parallel"]}
      ins(%x, %max : tensor<256x256xf32>, tensor<256xf32>) outs(%e2 : tensor<256x256xf32>) {
  ^bb0(%in: f32, %mx: f32, %out: f32):
    %d = arith.subf %in, %mx : f32
    %ex = math.exp %d : f32
    %t = arith.truncf %ex : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<256x256xf32>
  %e3 = tensor.empty() : tensor<256x128xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e3 : tensor<256x128xf32>) -> tensor<256x128xf32>
  %o = linalg.matmul ins(%p, %v : tensor<256x256xf32>, tensor<256x128xf32>) outs(%f : tensor<256x128xf32>) -> tensor<256x128xf32>
  return %o : tensor<256x128xf32>
}

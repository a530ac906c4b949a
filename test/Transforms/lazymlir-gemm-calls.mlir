// RUN: lazymlir-opt %s --split-input-file --lazymlir-mark-gemms | FileCheck %s --check-prefix=MARK
// RUN: lazymlir-opt %s --split-input-file --lazymlir-mark-gemms="min-work=1000000000" | FileCheck %s --check-prefix=SMALL
// RUN: lazymlir-opt %s --split-input-file --lazymlir-gemm-calls="threads=2" --canonicalize --cse | FileCheck %s --check-prefix=CALL

// A linear layer on batch x sequence rows (two M loops, side by side in A
// and C) with its weight read transposed in place (B = W^T: K innermost).
// MARK-LABEL: func.func @linear
// MARK:       linalg.generic
// MARK-SAME:  lazymlir.gemm
// SMALL-LABEL: func.func @linear
// SMALL-NOT:  lazymlir.gemm
#a = affine_map<(b, s, n, k) -> (b, s, k)>
#w = affine_map<(b, s, n, k) -> (n, k)>
#c = affine_map<(b, s, n, k) -> (b, s, n)>
func.func @linear(%x: tensor<8x16x128xf32>, %w: tensor<256x128xf32>) -> tensor<8x16x256xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16x256xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x16x256xf32>) -> tensor<8x16x256xf32>
  %r = linalg.generic {indexing_maps = [#a, #w, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<8x16x128xf32>, tensor<256x128xf32>) outs(%f : tensor<8x16x256xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x16x256xf32>
  return %r : tensor<8x16x256xf32>
}

// -----

// Not marked: a K loop that is not side by side with the other one in A
// (the batch loop between them), float64, a small product.
// MARK-LABEL: func.func @not_gemms
// MARK-NOT:   lazymlir.gemm
// MARK-LABEL: func.func @heads
// MARK-LABEL: func.func @ragged
// SMALL-LABEL: func.func @not_gemms
#a2 = affine_map<(m, n, k1, k2) -> (k1, m, k2)>
#b2 = affine_map<(m, n, k1, k2) -> (k1, k2, n)>
#c2 = affine_map<(m, n, k1, k2) -> (m, n)>
func.func @not_gemms(%a: tensor<64x64x64xf32>, %b: tensor<64x64x64xf32>, %c: tensor<64x64xf32>,
                     %d: tensor<128x128xf64>, %s: tensor<8x8xf32>) -> (tensor<64x64xf32>, tensor<128x128xf64>, tensor<8x8xf32>) {
  %r = linalg.generic {indexing_maps = [#a2, #b2, #c2], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%a, %b : tensor<64x64x64xf32>, tensor<64x64x64xf32>) outs(%c : tensor<64x64xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %t = arith.addf %acc, %m : f32
    linalg.yield %t : f32
  } -> tensor<64x64xf32>
  %r2 = linalg.matmul ins(%d, %d : tensor<128x128xf64>, tensor<128x128xf64>) outs(%d : tensor<128x128xf64>) -> tensor<128x128xf64>
  %r3 = linalg.matmul ins(%s, %s : tensor<8x8xf32>, tensor<8x8xf32>) outs(%s : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %r, %r2, %r3 : tensor<64x64xf32>, tensor<128x128xf64>, tensor<8x8xf32>
}

// -----

// On buffers: a batch of products (attention heads, batch x heads leading
// in every operand) becomes one call with each role's element strides: A
// 2x4 batches of 64x32 (batch stride 2048, rows 32, K 1), B transposed in
// place (K x N read from N x K: rows 1, columns 32), C 64x64 (4096, 64, 1).
// CALL:       func.func private @lazymlir_sgemm_batched(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64)
// CALL-LABEL: func.func @heads
// CALL-DAG:   %[[B8:.*]] = arith.constant 8 : i64
// CALL-DAG:   %[[M:.*]] = arith.constant 64 : i64
// CALL-DAG:   %[[K:.*]] = arith.constant 32 : i64
// CALL-DAG:   %[[ONE:.*]] = arith.constant 1 : i64
// CALL-DAG:   %[[AB:.*]] = arith.constant 2048 : i64
// CALL-DAG:   %[[CB:.*]] = arith.constant 4096 : i64
// CALL-DAG:   %[[T:.*]] = arith.constant 2 : i64
// CALL-DAG:   memref.extract_aligned_pointer_as_index %arg0
// CALL-DAG:   memref.extract_aligned_pointer_as_index %arg1
// CALL-DAG:   memref.extract_aligned_pointer_as_index %arg2
// CALL:       call @lazymlir_sgemm_batched(%[[B8]], %[[M]], %[[M]], %[[K]], %{{.*}}, %[[AB]], %[[K]], %[[ONE]], %{{.*}}, %[[AB]], %[[ONE]], %[[K]], %{{.*}}, %[[CB]], %[[M]], %[[ONE]], %[[T]], %[[ONE]])
// CALL-NOT:   linalg.generic
#qa = affine_map<(b, h, m, n, k) -> (b, h, m, k)>
#qb = affine_map<(b, h, m, n, k) -> (b, h, n, k)>
#qc = affine_map<(b, h, m, n, k) -> (b, h, m, n)>
func.func @heads(%q: memref<2x4x64x32xf32>, %k: memref<2x4x64x32xf32>, %s: memref<2x4x64x64xf32>) {
  linalg.generic {indexing_maps = [#qa, #qb, #qc], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : memref<2x4x64x32xf32>, memref<2x4x64x32xf32>) outs(%s : memref<2x4x64x64xf32>) attrs = {lazymlir.gemm} {
  ^bb0(%p: f32, %r: f32, %acc: f32):
    %m = arith.mulf %p, %r : f32
    %t = arith.addf %acc, %m : f32
    linalg.yield %t : f32
  }
  return
}

// -----

// A buffer whose rows are not contiguous with each other in the M role (a
// subview's rows of 32 inside rows of 64, batch x rows merged): kept as a
// linalg op, with a remark, for the loops.
// CALL-LABEL: func.func @strided
// CALL:       linalg.generic
// CALL-NOT:   call @lazymlir_sgemm_batched
#l = affine_map<(b, s, n, k) -> (b, s, k)>
#r = affine_map<(b, s, n, k) -> (k, n)>
#o = affine_map<(b, s, n, k) -> (b, s, n)>
func.func @strided(%x: memref<4x32x64xf32, strided<[4096, 64, 1]>>, %w: memref<64x64xf32>, %y: memref<4x32x64xf32>) {
  linalg.generic {indexing_maps = [#l, #r, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x32x64xf32, strided<[4096, 64, 1]>>, memref<64x64xf32>) outs(%y : memref<4x32x64xf32>) attrs = {lazymlir.gemm} {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %t = arith.addf %acc, %m : f32
    linalg.yield %t : f32
  }
  return
}

// -----

// `?` rows and columns, buffers laid out row by row: M and N are read from
// the buffers, and so are the strides of B's and C's rows (N elements).
// CALL-LABEL: func.func @ragged
// CALL-DAG:   %[[ROWS:.*]] = memref.dim %arg0, %c0
// CALL-DAG:   %[[M:.*]] = arith.index_cast %[[ROWS]] : index to i64
// CALL-DAG:   %[[COLS:.*]] = memref.dim %arg1, %c1
// CALL-DAG:   %[[N:.*]] = arith.index_cast %[[COLS]] : index to i64
// CALL-DAG:   extract_strided_metadata %arg1
// CALL-DAG:   %[[BROW:.*]] = arith.index_cast %strides#0 : index to i64
// CALL:       call @lazymlir_sgemm_batched(%c1_i64, %[[M]], %[[N]], %c128_i64, %{{.*}}, %c0_i64, %c128_i64, %c1_i64, %{{.*}}, %c0_i64, %[[BROW]], %c1_i64, %{{.*}}, %c0_i64, %{{.*}}, %c1_i64, %c2_i64, %c1_i64)
// CALL-NOT:   linalg.matmul
func.func @ragged(%x: memref<?x128xf32>, %w: memref<128x?xf32>, %y: memref<?x?xf32>) {
  linalg.matmul {lazymlir.gemm} ins(%x, %w : memref<?x128xf32>, memref<128x?xf32>) outs(%y : memref<?x?xf32>)
  return
}

// -----

// C zero-filled right before the product (through a reshape of its
// buffer): the fill is erased and the call overwrites C (last argument 0).
// A fill with a write to the buffer in between, or of another buffer, stays
// and the call accumulates (1).
// CALL-LABEL: func.func @zero_init
// CALL-NOT:   linalg.fill
// CALL:       call @lazymlir_sgemm_batched({{.*}}, %c2_i64, %c0_i64) {
// CALL-LABEL: func.func @kept_inits
// CALL:       linalg.fill
// CALL:       memref.store
// CALL:       call @lazymlir_sgemm_batched({{.*}}, %c2_i64, %c1_i64) {
// CALL:       linalg.fill ins(%{{.+}} : f32) outs(%arg3
// CALL:       call @lazymlir_sgemm_batched({{.*}}, %c2_i64, %c1_i64) {
func.func @zero_init(%x: memref<64x128xf32>, %w: memref<128x96xf32>, %y: memref<6144xf32>) {
  %z = arith.constant 0.0 : f32
  linalg.fill ins(%z : f32) outs(%y : memref<6144xf32>)
  %c = memref.expand_shape %y [[0, 1]] output_shape [64, 96] : memref<6144xf32> into memref<64x96xf32>
  linalg.matmul {lazymlir.gemm} ins(%x, %w : memref<64x128xf32>, memref<128x96xf32>) outs(%c : memref<64x96xf32>)
  return
}
func.func @kept_inits(%x: memref<64x128xf32>, %w: memref<128x96xf32>, %y: memref<64x96xf32>, %other: memref<64x96xf32>) {
  %z = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %i = arith.constant 3 : index
  linalg.fill ins(%z : f32) outs(%y : memref<64x96xf32>)
  memref.store %one, %y[%i, %i] : memref<64x96xf32>
  linalg.matmul {lazymlir.gemm} ins(%x, %w : memref<64x128xf32>, memref<128x96xf32>) outs(%y : memref<64x96xf32>)
  linalg.fill ins(%z : f32) outs(%other : memref<64x96xf32>)
  linalg.matmul {lazymlir.gemm} ins(%x, %w : memref<64x128xf32>, memref<128x96xf32>) outs(%y : memref<64x96xf32>)
  return
}

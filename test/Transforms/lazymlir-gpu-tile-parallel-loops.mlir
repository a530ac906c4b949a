// RUN: lazymlir-opt %s --split-input-file --lazymlir-gpu-tile-parallel-loops --sccp | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --lazymlir-gpu-tile-parallel-loops="block-size=128" --sccp | FileCheck %s --check-prefix=B128
// RUN: not lazymlir-opt %s --split-input-file --lazymlir-gpu-tile-parallel-loops="block-size=0" 2>&1 | FileCheck %s --check-prefix=BAD

// Rows of 512: blocks of 256 threads along the row (the innermost,
// contiguous dimension), one row per block; full tiles, no bound checks
// needed here.
// CHECK-LABEL: func.func @rows
// CHECK:       scf.parallel (%{{.*}}, %{{.*}}) = (%c0, %c0) to (%c128, %c512) step (%c1, %c256)
// CHECK:         scf.parallel (%{{.*}}, %{{.*}}) = (%c0, %c0) to (%c1, %c256) step (%c1, %c1)
// B128-LABEL: func.func @rows
// B128:       step (%c1, %c128)
// BAD: block-size must be positive, got 0
func.func @rows(%x: memref<128x512xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %c512 = arith.constant 512 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%c128, %c512) step (%c1, %c1) {
    memref.store %z, %x[%i, %j] : memref<128x512xf32>
  }
  return
}

// -----

// Short rows (10): a block takes 10 columns x 25 rows.
// CHECK-LABEL: func.func @short_rows
// CHECK:       scf.parallel (%{{.*}}, %{{.*}}) = (%c0, %c0) to (%c100, %c10) step (%c25, %c10)
func.func @short_rows(%x: memref<100x10xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %c100 = arith.constant 100 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%c100, %c10) step (%c1, %c1) {
    memref.store %z, %x[%i, %j] : memref<100x10xf32>
  }
  return
}

// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-per-thread-scratch))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-per-thread-scratch{max-stack-bytes=16}))" | FileCheck %s --check-prefix=HEAP

// A row tile's scratch as lazymlir-parallelize-tiles leaves it and
// convert-scf-to-openmp wraps it: allocated and freed in each iteration.
// Small static scratch goes on each thread's stack, once, before the
// worksharing loop; larger or dynamic scratch (whose size is known before
// the parallel region) is allocated before the loop and freed after it.
// CHECK-LABEL: func.func @tile_scratch
// CHECK: omp.parallel
// CHECK-NEXT: %[[SMALL:.+]] = memref.alloca() {alignment = 64 : i64} : memref<16xf32>
// CHECK-NEXT: %[[BIG:.+]] = memref.alloc() {alignment = 64 : i64} : memref<8192xf32>
// CHECK-NEXT: %[[DYN:.+]] = memref.alloc(%{{.+}}) : memref<?xf32>
// CHECK-NEXT: omp.wsloop
// CHECK-NOT: memref.alloc(
// CHECK-NOT: memref.dealloc
// CHECK: memref.store %{{.+}}, %[[SMALL]]
// CHECK: memref.store %{{.+}}, %[[BIG]]
// CHECK: memref.store %{{.+}}, %[[DYN]]
// CHECK: omp.yield
// CHECK: }
// CHECK-NEXT: }
// CHECK-NEXT: memref.dealloc %[[DYN]]
// CHECK-NEXT: memref.dealloc %[[BIG]]
// CHECK-NEXT: omp.terminator
// With a 16-byte stack limit the small scratch stays on the heap, once per
// thread too.
// HEAP-LABEL: func.func @tile_scratch
// HEAP: omp.parallel
// HEAP-NEXT: memref.alloc() {alignment = 64 : i64} : memref<16xf32>
// HEAP-NOT: memref.alloca(
func.func @tile_scratch(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c4096 = arith.constant 4096 : index
  %f = arith.constant 1.0 : f32
  %threads = llvm.mlir.constant(2 : i32) : i32
  omp.parallel num_threads(%threads : i32) {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%c4096) step (%c16) {
        memref.alloca_scope {
          %small = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
          %big = memref.alloc() {alignment = 64 : i64} : memref<8192xf32>
          %dyn = memref.alloc(%n) : memref<?xf32>
          scf.for %r = %c0 to %c16 step %c1 {
            memref.store %f, %small[%r] : memref<16xf32>
            memref.store %f, %big[%r] : memref<8192xf32>
            memref.store %f, %dyn[%r] : memref<?xf32>
          }
          memref.dealloc %small : memref<16xf32>
          memref.dealloc %big : memref<8192xf32>
          memref.dealloc %dyn : memref<?xf32>
        }
        omp.yield
      }
    }
    omp.terminator
  }
  return
}

// -----

// Left in the iteration: a size computed in it, a buffer without a dealloc
// in its block (freed elsewhere, or escaping), a loop outside omp.parallel.
// CHECK-LABEL: func.func @stays
// CHECK: omp.parallel
// CHECK-NEXT: omp.wsloop
// CHECK: memref.alloc(%{{.+}}) : memref<?xf32>
// CHECK: memref.store
// CHECK: memref.alloc() : memref<16xf32>
// CHECK: memref.copy
// CHECK: memref.dealloc
// CHECK: omp.yield
func.func @stays(%out: memref<16xf32>) -> memref<16xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c4096 = arith.constant 4096 : index
  %f = arith.constant 1.0 : f32
  %threads = llvm.mlir.constant(2 : i32) : i32
  omp.parallel num_threads(%threads : i32) {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%c4096) step (%c16) {
        %n = arith.addi %i, %c16 : index
        %dyn = memref.alloc(%n) : memref<?xf32>
        memref.store %f, %dyn[%c0] : memref<?xf32>
        %kept = memref.alloc() : memref<16xf32>
        memref.copy %kept, %out : memref<16xf32> to memref<16xf32>
        memref.dealloc %dyn : memref<?xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return %out : memref<16xf32>
}

// RUN: lazymlir-opt %s --lazymlir-schedule-worksharing | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-schedule-worksharing="schedule=static" | FileCheck %s --check-prefix=STATIC
// RUN: not lazymlir-opt %s --lazymlir-schedule-worksharing="schedule=dynamic" 2>&1 | FileCheck %s --check-prefix=BAD

// A worksharing loop without a schedule gets the guided one; a loop that has
// a schedule keeps it.
// CHECK-LABEL: func.func @loops
// CHECK: omp.wsloop schedule(guided) {
// CHECK: omp.wsloop schedule(static) {
// STATIC: omp.wsloop schedule(static) {
// STATIC: omp.wsloop schedule(static) {
// BAD: unknown schedule 'dynamic' (expected static or guided)
func.func @loops(%buffer: memref<1024xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c1024 = arith.constant 1024 : index
  %cst = arith.constant 1.0 : f32
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%c1024) step (%c1) {
        memref.store %cst, %buffer[%i] : memref<1024xf32>
        omp.yield
      }
    }
    omp.wsloop schedule(static) {
      omp.loop_nest (%i) : index = (%c0) to (%c1024) step (%c1) {
        memref.store %cst, %buffer[%i] : memref<1024xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return
}

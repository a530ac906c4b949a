// RUN: lazymlir-opt %s --split-input-file --lazymlir-cpu-pipeline="threads=2" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --lazymlir-cpu-pipeline | FileCheck %s --check-prefix=SEQ

// With threads, a large kernel's rows become one OpenMP worksharing loop on
// that many threads (the reduction stays a sequential loop inside, the
// scf.parallel's alloca scope is gone); the small fill stays sequential. By
// default everything runs in the calling thread.
// CHECK-LABEL: llvm.func @main
// CHECK: %[[THREADS:.+]] = llvm.mlir.constant(2 : i32) : i32
// CHECK: omp.parallel num_threads(%[[THREADS]] : i32) {
// CHECK-NEXT: omp.wsloop schedule(guided) {
// CHECK-NEXT: omp.loop_nest (%{{.+}}) : i64 = (%{{.+}}) to (%{{.+}}) step (%{{.+}}) {
// CHECK-NOT: memref.alloca_scope
// CHECK: llvm.cond_br
// CHECK: omp.yield
// CHECK: omp.terminator
// CHECK-NOT: omp.parallel
// SEQ-NOT: omp.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @main(%arg0: tensor<1024x256xf32>) -> tensor<1024xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1024xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<1024xf32>) -> tensor<1024xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<1024x256xf32>) outs(%f : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = math.exp %in : f32
    %2 = arith.addf %1, %out : f32
    linalg.yield %2 : f32
  } -> tensor<1024xf32>
  return %0 : tensor<1024xf32>
}

// -----

// matmul + bias + relu (K 32: too small for the runtime GEMM,
// lazymlir-mark-gemms): the 8x4 output tiles are one OpenMP loop (collapsed),
// each tile's accumulator stays in registers (no scratch tile on the stack,
// which the threads would share) and the finished tiles are written straight
// into the caller's output (no temporary copied into it).
// CHECK-LABEL: llvm.func @main
// CHECK-NOT: llvm.alloca
// CHECK: omp.parallel
// CHECK-NEXT: omp.wsloop schedule(guided) {
// CHECK-NEXT: omp.loop_nest (%{{.+}}, %{{.+}}) : i64 = {{.*}} collapse(2) {
// CHECK: llvm.intr.fmuladd({{.*}}) : (vector<32xf32>, vector<32xf32>, vector<32xf32>) -> vector<32xf32>
// CHECK: omp.terminator
// CHECK-NOT: memcpy
// CHECK: llvm.return
// SEQ-LABEL: llvm.func @main
// SEQ-NOT: llvm.alloca
// SEQ-NOT: omp.
// SEQ-NOT: memcpy
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @main(%arg0: tensor<64x32xf32>, %arg1: tensor<32x64xf32>, %arg2: tensor<64xf32>) -> tensor<64x64xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<64x64xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<64x32xf32>, tensor<32x64xf32>) outs(%1 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%2, %arg2 : tensor<64x64xf32>, tensor<64xf32>) outs(%0 : tensor<64x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %4 = arith.addf %in, %in_0 : f32
    %5 = arith.cmpf ugt, %4, %cst : f32
    %6 = arith.select %5, %4, %cst : f32
    linalg.yield %6 : f32
  } -> tensor<64x64xf32>
  return %3 : tensor<64x64xf32>
}

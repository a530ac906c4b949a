// RUN: lazymlir-opt %s --lazymlir-outline-kernels --lazymlir-instrument-kernels | FileCheck %s

// A kernel over `?` sizes: its shapes print `?` (not kDynamic,
// -9223372036854775808), and its bytes, unknown at compile time, count 0;
// its flops count a loop with dynamic bounds once.
// CHECK:       module attributes {lazymlir.profile_sites = [
// CHECK-SAME:    {bytes = 0 : i64, flops = 64 : i64, kernel = "[[K:__lazymlir_k_[0-9a-f]{32}]]", ops = "", shapes = "index, ?x64xf32, ?x64xf32"}
// CHECK-NOT:   -9223372036854775808
// The row count is passed to the kernel (the first operand, index).

func.func @main(%m: memref<?x64xf32>, %n: memref<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %rows = memref.dim %m, %c0 : memref<?x64xf32>
  scf.for %i = %c0 to %rows step %c1 {
    scf.for %j = %c0 to %c64 step %c1 {
      %x = memref.load %m[%i, %j] : memref<?x64xf32>
      %y = arith.addf %x, %x : f32
      memref.store %y, %n[%i, %j] : memref<?x64xf32>
    }
  }
  return
}

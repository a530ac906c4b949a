// RUN: lazymlir-opt %s --lazymlir-outline-kernels --lazymlir-instrument-kernels | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-outline-kernels | FileCheck %s --check-prefix=PLAIN

// Each kernel call is bracketed by the runtime's clock reads, numbered by
// call site; the module lists the sites: the callee, the ops named by the
// nest's "op:" file locations (in order, once each; other locations are not
// ops), the operand shapes, their
// bytes and the estimated flops (a vector<8xf32> FMA and a 2x4x2
// vector.contract in 16 iterations: 16 * (8*2 + 2*16) = 768; a scalar addf
// in 8x4: 32).

// CHECK:       module attributes {lazymlir.profile_sites = [
// CHECK-SAME:    {bytes = 1024 : i64, flops = 768 : i64, kernel = "[[FMA:__lazymlir_k_[0-9a-f]{32}]]", ops = "aten.mm, aten.add.Tensor", shapes = "128xf32, 128xf32"}
// CHECK-SAME:    {bytes = 256 : i64, flops = 32 : i64, kernel = "[[ADD:__lazymlir_k_[0-9a-f]{32}]]", ops = "aten.relu", shapes = "8x4xf32, 8x4xf32"}
// CHECK-SAME:    {bytes = 256 : i64, flops = 32 : i64, kernel = "[[ADD]]", ops = "aten.relu", shapes = "8x4xf32, 8x4xf32"}
// CHECK-SAME:  ]}
// CHECK-LABEL: func.func @main(
// CHECK:         %[[S0:.*]] = arith.constant 0 : i64
// CHECK-NEXT:    call @__lazymlir_profile_begin(%[[S0]]) : (i64) -> ()
// CHECK-NEXT:    call @[[FMA]](
// CHECK-NEXT:    call @__lazymlir_profile_end(%[[S0]]) : (i64) -> ()
// CHECK:         %[[S1:.*]] = arith.constant 1 : i64
// CHECK-NEXT:    call @__lazymlir_profile_begin(%[[S1]])
// CHECK-NEXT:    call @[[ADD]](
// CHECK-NEXT:    call @__lazymlir_profile_end(%[[S1]])
// CHECK:         %[[S2:.*]] = arith.constant 2 : i64
// CHECK-NEXT:    call @__lazymlir_profile_begin(%[[S2]])
// CHECK-NEXT:    call @[[ADD]](
// CHECK-NEXT:    call @__lazymlir_profile_end(%[[S2]])
// CHECK:         return
// CHECK-DAG:   func.func private @__lazymlir_profile_begin(i64)
// CHECK-DAG:   func.func private @__lazymlir_profile_end(i64)

// Without the pass: no clock reads, no site list.
// PLAIN-NOT:   lazymlir.profile_sites
// PLAIN-NOT:   __lazymlir_profile

func.func @main(%a: memref<128xf32>, %b: memref<128xf32>, %m: memref<8x4xf32>, %n: memref<8x4xf32>, %o: memref<8x4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c128 = arith.constant 128 : index
  %f0 = arith.constant 0.0 : f32
  scf.for %i = %c0 to %c128 step %c8 {
    %x = vector.transfer_read %a[%i], %f0 : memref<128xf32>, vector<8xf32> loc("op:aten.mm":3:0)
    %y = vector.fma %x, %x, %x : vector<8xf32> loc("op:aten.add.Tensor":4:0)
    %l = arith.constant dense<1.0> : vector<2x2xf32>
    %r = arith.constant dense<1.0> : vector<2x4xf32>
    %acc = arith.constant dense<0.0> : vector<2x4xf32>
    %c = vector.contract {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"], kind = #vector.kind<add>} %l, %r, %acc : vector<2x2xf32>, vector<2x4xf32> into vector<2x4xf32>
    vector.transfer_write %y, %b[%i] : vector<8xf32>, memref<128xf32> loc("op:aten.mm":3:0)
  } loc("op:aten.mm":3:0)

  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %j = %c0 to %c4 step %c1 {
      %x = memref.load %m[%i, %j] : memref<8x4xf32> loc("op:aten.relu":5:0)
      %y = arith.addf %x, %x : f32 loc("op:aten.relu":5:0)
      memref.store %y, %n[%i, %j] : memref<8x4xf32> loc("op:aten.relu":5:0)
    }
  }
  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %j = %c0 to %c4 step %c1 {
      %x = memref.load %n[%i, %j] : memref<8x4xf32> loc("op:aten.relu":7:0)
      %y = arith.addf %x, %x : f32 loc("op:aten.relu":7:0)
      memref.store %y, %o[%i, %j] : memref<8x4xf32> loc("op:aten.relu":7:0)
    }
  }
  return
}

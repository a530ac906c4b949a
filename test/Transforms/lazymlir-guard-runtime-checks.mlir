// RUN: lazymlir-opt %s --split-input-file --lazymlir-guard-runtime-checks | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --verify-diagnostics --lazymlir-guard-runtime-checks -o /dev/null
// RUN: lazymlir-opt %s --split-input-file --lazymlir-cpu-pipeline | FileCheck %s --check-prefix=LOWERED
// RUN: lazymlir-opt %s --split-input-file --lazymlir-cpu-pipeline="threads=2" | FileCheck %s --check-prefix=PARALLEL
// RUN: lazymlir-opt %s --split-input-file --lazymlir-cpu-pipeline="runtime-checks=false" | FileCheck %s --check-prefix=UNCHECKED

// Without runtime-checks, the pipeline adds no check (measuring their cost).
// UNCHECKED-NOT: __lazymlir_check_failed

// Embedding as torch-mlir emits it: the asserts become checks, the
// data-dependent row index is replaced by 0 when outside [0, 10); the
// column (linalg.index) is left alone. The checks depend on the index
// element alone: one reduction over the indices ORs them before the op, and
// the flag is stored once after it; the body keeps only the clamp.
// CHECK: memref.global @__lazymlir_check_failed : memref<i32> = dense<0>
// CHECK-LABEL: func.func @main
// CHECK-NOT: cf.assert
// CHECK: %[[FALSE:.+]] = linalg.fill ins(%false : i1) outs(%{{.+}} : tensor<i1>)
// CHECK: %[[ANY:.+]] = linalg.generic {{{.*}}iterator_types = ["reduction", "reduction"]} ins(%arg1 : tensor<2x2xi64>) outs(%[[FALSE]] : tensor<i1>)
// CHECK: ^bb0(%[[X:.+]]: i64, %[[ACC:.+]]: i1):
// CHECK: %[[XI:.+]] = arith.index_cast %[[X]] : i64 to index
// CHECK: %[[LT:.+]] = arith.cmpi slt, %[[XI]], %c10
// CHECK: %[[A1:.+]] = arith.xori %[[LT]], %true
// CHECK: %[[GE:.+]] = arith.cmpi sge, %[[X]], %c0_i64
// CHECK: %[[A2:.+]] = arith.xori %[[GE]], %true
// CHECK: %[[OUTX:.+]] = arith.cmpi uge, %[[XI]], %{{.+}} : index
// CHECK: %[[O1:.+]] = arith.ori %[[ACC]], %[[OUTX]]
// CHECK: %[[O2:.+]] = arith.ori %[[O1]], %[[A1]]
// CHECK: %[[O3:.+]] = arith.ori %[[O2]], %[[A2]]
// CHECK: linalg.yield %[[O3]] : i1
// CHECK: %[[FAILED:.+]] = tensor.extract %[[ANY]][] : tensor<i1>
// CHECK: scf.if %[[FAILED]] {
// CHECK-NEXT: %[[FLAG:.+]] = memref.get_global @__lazymlir_check_failed : memref<i32>
// CHECK-NEXT: %[[ONE:.+]] = arith.constant 1 : i32
// CHECK-NEXT: memref.store %[[ONE]], %[[FLAG]][] : memref<i32>
// CHECK: linalg.generic {{{.*}}iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg1 : tensor<2x2xi64>)
// CHECK: ^bb0(%[[IN:.+]]: i64, %{{.+}}: f32):
// CHECK: %[[ROW:.+]] = arith.index_cast %[[IN]] : i64 to index
// CHECK: %[[COL:.+]] = linalg.index 2 : index
// CHECK-NOT: scf.if
// CHECK: %[[OUT:.+]] = arith.cmpi uge, %[[ROW]], %{{.+}} : index
// CHECK: %[[SAFE:.+]] = arith.select %[[OUT]], %{{.+}}, %[[ROW]] : index
// CHECK-NOT: scf.if
// CHECK: tensor.extract %arg0[%[[SAFE]], %[[COL]]] : tensor<10x4xf32>
// CHECK-NEXT: linalg.yield
// LOWERED: llvm.mlir.global external @__lazymlir_check_failed(0 : i32)
// LOWERED: llvm.func @main
// LOWERED: llvm.mlir.addressof @__lazymlir_check_failed
// LOWERED: llvm.store
// LOWERED-NOT: llvm.call @abort
// LOWERED: llvm.return
#map = affine_map<(d0, d1, d2) -> (d0, d1)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @main(%arg0: tensor<10x4xf32>, %arg1: tensor<2x2xi64>) -> tensor<2x2x4xf32> {
  %c10 = arith.constant 10 : index
  %c0_i64 = arith.constant 0 : i64
  %0 = tensor.empty() : tensor<2x2x4xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg1 : tensor<2x2xi64>) outs(%0 : tensor<2x2x4xf32>) {
  ^bb0(%in: i64, %out: f32):
    %3 = arith.index_cast %in : i64 to index
    %4 = linalg.index 2 : index
    %5 = arith.cmpi slt, %3, %c10 : index
    cf.assert %5, "index must be smaller than dim size"
    %6 = arith.cmpi sge, %in, %c0_i64 : i64
    cf.assert %6, "index must be larger or equal to 0"
    %extracted = tensor.extract %arg0[%3, %4] : tensor<10x4xf32>
    linalg.yield %extracted : f32
  } -> tensor<2x2x4xf32>
  return %1 : tensor<2x2x4xf32>
}

// -----

// t[idx] with a negative index wrapped once: -9 on 10 rows is still -> 1,
// but -19 stays negative: checked all the same.
// CHECK-LABEL: func.func @main
// CHECK: linalg.generic {{{.*}}iterator_types = ["reduction"]} ins(%arg1 : tensor<2xi64>)
// CHECK: %[[XI:.+]] = arith.index_cast
// CHECK: arith.cmpi uge, %[[XI]], %{{.+}} : index
// CHECK: scf.if
// CHECK: linalg.generic {{{.*}}iterator_types = ["parallel", "parallel"]}
// CHECK: %[[IDX:.+]] = arith.index_cast
// CHECK: %[[OUT:.+]] = arith.cmpi uge, %[[IDX]], %{{.+}} : index
// CHECK: %[[SAFE:.+]] = arith.select %[[OUT]], %{{.+}}, %[[IDX]] : index
// CHECK-NEXT: tensor.extract %arg0[%[[SAFE]], %{{.+}}] : tensor<10x4xf32>
// LOWERED: llvm.mlir.global external @__lazymlir_check_failed(0 : i32)
// LOWERED: llvm.func @main
// LOWERED: llvm.mlir.addressof @__lazymlir_check_failed
// LOWERED: llvm.store
// LOWERED-NOT: llvm.call @abort
// LOWERED: llvm.return
#map = affine_map<(d0, d1) -> (d0)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%arg0: tensor<10x4xf32>, %arg1: tensor<2xi64>) -> tensor<2x4xf32> {
  %c0_i64 = arith.constant 0 : i64
  %c10_i64 = arith.constant 10 : i64
  %0 = tensor.empty() : tensor<2x4xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<2xi64>) outs(%0 : tensor<2x4xf32>) {
  ^bb0(%in: i64, %out: f32):
    %3 = arith.cmpi slt, %in, %c0_i64 : i64
    %4 = arith.addi %in, %c10_i64 : i64
    %5 = arith.select %3, %4, %in : i64
    %6 = arith.index_cast %5 : i64 to index
    %7 = linalg.index 1 : index
    %extracted = tensor.extract %arg0[%6, %7] : tensor<10x4xf32>
    linalg.yield %extracted : f32
  } -> tensor<2x4xf32>
  return %1 : tensor<2x4xf32>
}

// -----

// An index read with tensor.extract outside any linalg body, and an insert.
// CHECK-LABEL: func.func @main
// CHECK: %[[I:.+]] = tensor.extract %arg1[] : tensor<i64>
// CHECK: %[[IDX:.+]] = arith.index_cast %[[I]]
// CHECK: %[[OUT:.+]] = arith.cmpi uge, %[[IDX]], %c8 : index
// CHECK: %[[SAFE:.+]] = arith.select %[[OUT]], %c0, %[[IDX]]
// CHECK: scf.if %[[OUT]]
// CHECK: tensor.extract %arg0[%[[SAFE]]] : tensor<8xf32>
// CHECK: %[[OUT2:.+]] = arith.cmpi uge, %[[IDX]], %{{.+}} : index
// CHECK: %[[SAFE2:.+]] = arith.select %[[OUT2]], %{{.+}}, %[[IDX]]
// CHECK: scf.if %[[OUT2]]
// CHECK: tensor.insert %{{.+}} into %arg0[%[[SAFE2]]] : tensor<8xf32>
// LOWERED: // {{-+}}
// LOWERED: llvm.mlir.global external @__lazymlir_check_failed(0 : i32)
// LOWERED: llvm.func @main
// LOWERED: llvm.mlir.addressof @__lazymlir_check_failed
// LOWERED: llvm.store
// LOWERED-NOT: llvm.call @abort
// LOWERED: llvm.return
func.func @main(%arg0: tensor<8xf32>, %arg1: tensor<i64>) -> (tensor<1xf32>, tensor<8xf32>) {
  %i = tensor.extract %arg1[] : tensor<i64>
  %idx = arith.index_cast %i : i64 to index
  %v = tensor.extract %arg0[%idx] : tensor<8xf32>
  %cst = arith.constant 1.0 : f32
  %r = tensor.insert %cst into %arg0[%idx] : tensor<8xf32>
  %t = tensor.from_elements %v : tensor<1xf32>
  return %t, %r : tensor<1xf32>, tensor<8xf32>
}

// -----

// Indices computed from linalg.index and constants only (a pad, an
// upsampling) are provably in range: untouched, and no flag at all.
// CHECK-NOT: memref.global
// CHECK-LABEL: func.func @main
// CHECK-NOT: arith.cmpi
// CHECK-NOT: scf.if
// CHECK: %[[I:.+]] = arith.divui %{{.+}}, %c2 : index
// CHECK-NEXT: tensor.extract %arg0[%[[I]]] : tensor<4xf32>
// LOWERED: // {{-+}}
// LOWERED-NOT: llvm.mlir.global
// LOWERED: llvm.func @main
// LOWERED-NOT: __lazymlir_check_failed
// LOWERED-NOT: llvm.call @abort
// LOWERED: llvm.return
#map = affine_map<(d0) -> (d0)>
func.func @main(%arg0: tensor<4xf32>) -> tensor<8xf32> {
  %c2 = arith.constant 2 : index
  %0 = tensor.empty() : tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel"]} outs(%0 : tensor<8xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = arith.divui %i, %c2 : index
    %v = tensor.extract %arg0[%j] : tensor<4xf32>
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %1 : tensor<8xf32>
}

// -----

// Integer division and remainder: a zero divisor divides by 1 and sets the
// flag, INT_MIN / -1 divides by 1 (no flag); a non-zero constant divisor is
// left alone, -1 gets the overflow guard only, a constant 0 always fails.
// Divisors read once per element are checked in place (no extra pass).
// CHECK-LABEL: func.func @main
// CHECK-NOT: iterator_types = ["reduction"]
// CHECK: ^bb0(%[[A:.+]]: i64, %[[B:.+]]: i64, %{{.+}}: i64):
// CHECK: %[[Z:.+]] = arith.cmpi eq, %[[B]], %{{.+}} : i64
// CHECK: %[[NEG:.+]] = arith.cmpi eq, %[[B]], %c-1_i64{{.*}} : i64
// CHECK: %[[MIN:.+]] = arith.cmpi eq, %[[A]], %c-9223372036854775808_i64 : i64
// CHECK: %[[OVF:.+]] = arith.andi %[[MIN]], %[[NEG]]
// CHECK: %[[R:.+]] = arith.ori %[[Z]], %[[OVF]]
// CHECK: %[[SAFE:.+]] = arith.select %[[R]], %c1_i64, %[[B]]
// CHECK: scf.if %[[Z]] {
// CHECK: memref.store
// CHECK: arith.divsi %[[A]], %[[SAFE]] : i64
// CHECK: %[[ZU:.+]] = arith.cmpi eq, %[[B]], %{{.+}} : i64
// CHECK: %[[SAFEU:.+]] = arith.select %[[ZU]], %{{.+}}, %[[B]]
// CHECK: scf.if %[[ZU]] {
// CHECK: arith.remui %[[A]], %[[SAFEU]] : i64
// CHECK: arith.divsi %[[A]], %c3_i64 : i64
// CHECK: %[[SAFE2:.+]] = arith.select %{{.+}}, %{{.+}}, %c-1_i64 : i64
// CHECK-NEXT: arith.floordivsi %[[A]], %[[SAFE2]] : i64
// x % -1 == x % 1: -1 is replaced without looking at the dividend.
// CHECK: %[[Z3:.+]] = arith.cmpi eq, %c0_i64, %{{.+}} : i64
// CHECK: %[[M3:.+]] = arith.cmpi eq, %c0_i64, %{{.+}} : i64
// CHECK: %[[R3:.+]] = arith.ori %[[Z3]], %[[M3]]
// CHECK: %[[SAFE3:.+]] = arith.select %[[R3]], %{{.+}}, %c0_i64 : i64
// CHECK: scf.if %[[Z3]]
// CHECK: memref.store
// CHECK: arith.remsi %[[A]], %[[SAFE3]] : i64
// LOWERED: llvm.mlir.global external @__lazymlir_check_failed(0 : i32)
// LOWERED: llvm.func @main
// LOWERED: llvm.mlir.addressof @__lazymlir_check_failed
// LOWERED: llvm.store
// LOWERED-NOT: llvm.call @abort
// LOWERED: llvm.return
#map = affine_map<(d0) -> (d0)>
func.func @main(%arg0: tensor<4xi64>, %arg1: tensor<4xi64>) -> tensor<4xi64> {
  %c0_i64 = arith.constant 0 : i64
  %c3_i64 = arith.constant 3 : i64
  %cm1_i64 = arith.constant -1 : i64
  %0 = tensor.empty() : tensor<4xi64>
  %1 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%arg0, %arg1 : tensor<4xi64>, tensor<4xi64>) outs(%0 : tensor<4xi64>) {
  ^bb0(%a: i64, %b: i64, %out: i64):
    %q = arith.divsi %a, %b : i64
    %r = arith.remui %a, %b : i64
    %k = arith.divsi %a, %c3_i64 : i64
    %f = arith.floordivsi %a, %cm1_i64 : i64
    %z = arith.remsi %a, %c0_i64 : i64
    %s1 = arith.addi %q, %r : i64
    %s2 = arith.addi %s1, %k : i64
    %s3 = arith.addi %s2, %f : i64
    %s4 = arith.addi %s3, %z : i64
    linalg.yield %s4 : i64
  } -> tensor<4xi64>
  return %1 : tensor<4xi64>
}

// -----

// torch-mlir's integer floor division in f64: a zero divisor sets the flag
// and the quotient (read by nothing else) is by 1.0 instead.
// CHECK-LABEL: func.func @main
// CHECK-NOT: iterator_types = ["reduction"]
// CHECK: ^bb0(%[[A:.+]]: i64, %[[B:.+]]: i64, %{{.+}}: i64):
// CHECK: %[[FB:.+]] = arith.sitofp %[[B]] : i64 to f64
// CHECK: %[[Z:.+]] = arith.cmpi eq, %[[B]], %{{.+}} : i64
// CHECK: %[[ONE:.+]] = arith.constant 1.0{{.*}} : f64
// CHECK: %[[SAFE:.+]] = arith.select %[[Z]], %[[ONE]], %[[FB]] : f64
// CHECK: scf.if %[[Z]]
// CHECK: memref.store
// CHECK: arith.divf %{{.+}}, %[[SAFE]] : f64
// CHECK-NEXT: math.floor
// CHECK-NEXT: arith.fptosi
// LOWERED: llvm.mlir.global external @__lazymlir_check_failed(0 : i32)
// LOWERED: llvm.func @main
// LOWERED: llvm.mlir.addressof @__lazymlir_check_failed
// LOWERED: llvm.store
// LOWERED-NOT: llvm.call @abort
// LOWERED: llvm.return
#map = affine_map<(d0) -> (d0)>
func.func @main(%arg0: tensor<4xi64>, %arg1: tensor<4xi64>) -> tensor<4xi64> {
  %0 = tensor.empty() : tensor<4xi64>
  %1 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%arg0, %arg1 : tensor<4xi64>, tensor<4xi64>) outs(%0 : tensor<4xi64>) {
  ^bb0(%a: i64, %b: i64, %out: i64):
    %fa = arith.sitofp %a : i64 to f64
    %fb = arith.sitofp %b : i64 to f64
    %d = arith.divf %fa, %fb : f64
    %fl = math.floor %d : f64
    %i = arith.fptosi %fl : f64 to i64
    linalg.yield %i : i64
  } -> tensor<4xi64>
  return %1 : tensor<4xi64>
}

// -----

// True division of integers (a float result) is not checked: eager gives inf.
// CHECK-NOT: memref.global
// CHECK-LABEL: func.func @main
// CHECK-NOT: scf.if
// CHECK: arith.divf
// CHECK-NOT: scf.if
// CHECK: return
// LOWERED: // {{-+}}
// LOWERED-NOT: llvm.mlir.global
// LOWERED: llvm.func @main
// LOWERED-NOT: __lazymlir_check_failed
// LOWERED-NOT: llvm.call @abort
// LOWERED: llvm.return
#map = affine_map<(d0) -> (d0)>
func.func @main(%arg0: tensor<4xi64>, %arg1: tensor<4xi64>) -> tensor<4xf32> {
  %0 = tensor.empty() : tensor<4xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%arg0, %arg1 : tensor<4xi64>, tensor<4xi64>) outs(%0 : tensor<4xf32>) {
  ^bb0(%a: i64, %b: i64, %out: f32):
    %fa = arith.sitofp %a : i64 to f32
    %fb = arith.sitofp %b : i64 to f32
    %d = arith.divf %fa, %fb : f32
    linalg.yield %d : f32
  } -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// A gather on a large table: the hoisted check reduction and the clamped
// body survive fusion with its consumer and lower; the flag is stored.
// CHECK-LABEL: func.func @main
// CHECK: iterator_types = ["reduction", "reduction"]} ins(%arg1 : tensor<1024x512xi64>)
// CHECK: scf.if
// CHECK: iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<1024x512xi64>)
// CHECK-NOT: scf.if
// CHECK: return
// LOWERED: // {{-+}}
// LOWERED: llvm.mlir.global external @__lazymlir_check_failed(0 : i32)
// LOWERED: llvm.func @main
// LOWERED: llvm.mlir.addressof @__lazymlir_check_failed
// LOWERED: llvm.store
// LOWERED-NOT: llvm.call @abort
// LOWERED: llvm.return
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%arg0: tensor<1024x512xf32>, %arg1: tensor<1024x512xi64>) -> tensor<1024x512xf32> {
  %c512 = arith.constant 512 : index
  %c0_i64 = arith.constant 0 : i64
  %cst = arith.constant 1.0 : f32
  %0 = tensor.empty() : tensor<1024x512xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<1024x512xi64>) outs(%0 : tensor<1024x512xf32>) {
  ^bb0(%in: i64, %out: f32):
    %4 = linalg.index 0 : index
    %5 = arith.index_cast %in : i64 to index
    %6 = arith.cmpi slt, %5, %c512 : index
    cf.assert %6, "index must be smaller than dim size"
    %7 = arith.cmpi sge, %in, %c0_i64 : i64
    cf.assert %7, "index must be larger or equal to 0"
    %extracted = tensor.extract %arg0[%4, %5] : tensor<1024x512xf32>
    linalg.yield %extracted : f32
  } -> tensor<1024x512xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%1 : tensor<1024x512xf32>) outs(%0 : tensor<1024x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.addf %in, %cst : f32
    linalg.yield %3 : f32
  } -> tensor<1024x512xf32>
  return %2 : tensor<1024x512xf32>
}

// -----

// An index computed from two inputs (no single input decides it): the flag
// is stored in the body, under scf.if; the kernel still lowers, to a
// parallel loop with the conditional store inside.
// CHECK-LABEL: func.func @main
// CHECK-NOT: iterator_types = ["reduction"
// CHECK: ^bb0(%[[A:.+]]: i64, %[[B:.+]]: i64, %{{.+}}: f32):
// CHECK: %[[SUM:.+]] = arith.addi %[[A]], %[[B]] : i64
// CHECK: %[[IDX:.+]] = arith.index_cast %[[SUM]] : i64 to index
// CHECK: %[[OUT:.+]] = arith.cmpi uge, %[[IDX]], %{{.+}} : index
// CHECK: %[[SAFE:.+]] = arith.select %[[OUT]], %{{.+}}, %[[IDX]] : index
// CHECK: scf.if %[[OUT]] {
// CHECK: memref.store
// CHECK: tensor.extract %arg0[%[[SAFE]]] : tensor<4096xf32>
// LOWERED: llvm.mlir.global external @__lazymlir_check_failed(0 : i32)
// LOWERED: llvm.func @main
// LOWERED: llvm.mlir.addressof @__lazymlir_check_failed
// LOWERED: llvm.store
// LOWERED-NOT: llvm.call @abort
// LOWERED: llvm.return
// PARALLEL: llvm.func @main
// PARALLEL: omp.parallel
// PARALLEL: omp.wsloop
// PARALLEL: llvm.cond_br
// PARALLEL: llvm.store %{{.+}}, %{{.+}} : i32, !llvm.ptr
// PARALLEL: omp.yield
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%arg0: tensor<4096xf32>, %arg1: tensor<1024x512xi64>, %arg2: tensor<1024x512xi64>) -> tensor<1024x512xf32> {
  %0 = tensor.empty() : tensor<1024x512xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg1, %arg2 : tensor<1024x512xi64>, tensor<1024x512xi64>) outs(%0 : tensor<1024x512xf32>) {
  ^bb0(%a: i64, %b: i64, %out: f32):
    %s = arith.addi %a, %b : i64
    %i = arith.index_cast %s : i64 to index
    %v = tensor.extract %arg0[%i] : tensor<4096xf32>
    linalg.yield %v : f32
  } -> tensor<1024x512xf32>
  return %1 : tensor<1024x512xf32>
}

// -----

// A divisor broadcast along a loop dimension (a // b[:, None]): its check
// is hoisted into a reduction over the divisors.
// CHECK-LABEL: func.func @main
// CHECK: linalg.generic {{{.*}}iterator_types = ["reduction"]} ins(%arg1 : tensor<8xi64>)
// CHECK: arith.cmpi eq
// CHECK: scf.if
// CHECK: memref.store
// CHECK: iterator_types = ["parallel", "parallel"]
// CHECK-NOT: scf.if
// CHECK: arith.divsi
// CHECK-NOT: scf.if
// CHECK: return
// LOWERED: llvm.mlir.global external @__lazymlir_check_failed(0 : i32)
// LOWERED: llvm.func @main
// LOWERED: llvm.return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @main(%arg0: tensor<8x64xi64>, %arg1: tensor<8xi64>) -> tensor<8x64xi64> {
  %0 = tensor.empty() : tensor<8x64xi64>
  %1 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<8x64xi64>, tensor<8xi64>) outs(%0 : tensor<8x64xi64>) {
  ^bb0(%a: i64, %b: i64, %out: i64):
    %q = arith.divsi %a, %b : i64
    linalg.yield %q : i64
  } -> tensor<8x64xi64>
  return %1 : tensor<8x64xi64>
}

// -----

// The same with a dynamic (`?`) row count: that the op reads the divisors
// whole cannot be shown, so the check stays in the body (correct, per
// element), and the pass says so.
// CHECK-LABEL: func.func @main
// CHECK-NOT: iterator_types = ["reduction"]
// CHECK: iterator_types = ["parallel", "parallel"]
// CHECK: arith.cmpi eq
// CHECK: arith.divsi
// LOWERED: llvm.func @main
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @main(%arg0: tensor<?x64xi64>, %arg1: tensor<?xi64>) -> tensor<?x64xi64> {
  %c0 = arith.constant 0 : index
  %dim = tensor.dim %arg0, %c0 : tensor<?x64xi64>
  %0 = tensor.empty(%dim) : tensor<?x64xi64>
  // expected-remark @below {{lazymlir-guard-runtime-checks: check not hoisted out of the op: dynamic dimension}}
  %1 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<?x64xi64>, tensor<?xi64>) outs(%0 : tensor<?x64xi64>) {
  ^bb0(%a: i64, %b: i64, %out: i64):
    %q = arith.divsi %a, %b : i64
    linalg.yield %q : i64
  } -> tensor<?x64xi64>
  return %1 : tensor<?x64xi64>
}

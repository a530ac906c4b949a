// RUN: lazymlir-opt %s --split-input-file --lazymlir-guard-donated-writes | FileCheck %s

// The index check comes first; from the first write into the donated
// argument (through a view) on, the entry runs only if no check failed, so
// a failed check leaves the argument as the caller passed it. Reads of the
// donated argument before that (the forward pass's) are not writes.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: memref<8xf32>, %arg1: memref<4xi64>, %arg2: memref<4xf32>)
// CHECK-NOT: lazymlir.donated
// CHECK: linalg.generic {{.*}} ins(%arg0 : memref<8xf32>)
// CHECK: memref.get_global @__lazymlir_check_failed
// CHECK: %[[HALF:.*]] = memref.subview %arg0
// CHECK: %[[FLAG:.*]] = memref.get_global @__lazymlir_check_failed
// CHECK: %[[FAILED:.*]] = memref.load %[[FLAG]][]
// CHECK: %[[OK:.*]] = arith.cmpi eq, %[[FAILED]], %{{.*}} : i32
// CHECK: scf.if %[[OK]] {
// CHECK-NEXT: linalg.generic {{.*}} outs(%[[HALF]] : memref<4xf32, strided<[1]>>)
// CHECK: memref.dealloc
// CHECK-NEXT: }
// CHECK-NEXT: return
memref.global @__lazymlir_check_failed : memref<i32> = dense<0>
#map = affine_map<(d0) -> (d0)>
#red = affine_map<(d0) -> ()>
func.func @main(%arg0: memref<8xf32> {lazymlir.donated}, %arg1: memref<4xi64>, %arg2: memref<4xf32>) {
  %sum = memref.alloc() : memref<f32>
  linalg.generic {indexing_maps = [#map, #red], iterator_types = ["reduction"]} ins(%arg0 : memref<8xf32>) outs(%sum : memref<f32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg1 : memref<4xi64>) outs(%arg2 : memref<4xf32>) {
  ^bb0(%i: i64, %o: f32):
    %c8 = arith.constant 8 : i64
    %bad = arith.cmpi uge, %i, %c8 : i64
    scf.if %bad {
      %flag = memref.get_global @__lazymlir_check_failed : memref<i32>
      %one = arith.constant 1 : i32
      memref.store %one, %flag[] : memref<i32>
    }
    %f = arith.sitofp %i : i64 to f32
    linalg.yield %f : f32
  }
  %half = memref.subview %arg0[0] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1]>>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg2 : memref<4xf32>) outs(%half : memref<4xf32, strided<[1]>>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  }
  memref.dealloc %sum : memref<f32>
  return
}

// -----

// Without the check flag nothing needs guarding: only the marks go.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: memref<8xf32>)
// CHECK-NOT: scf.if
#map = affine_map<(d0) -> (d0)>
func.func @main(%arg0: memref<8xf32> {lazymlir.donated}) {
  linalg.generic {indexing_maps = [#map], iterator_types = ["parallel"]} outs(%arg0 : memref<8xf32>) {
  ^bb0(%o: f32):
    %s = arith.addf %o, %o : f32
    linalg.yield %s : f32
  }
  return
}


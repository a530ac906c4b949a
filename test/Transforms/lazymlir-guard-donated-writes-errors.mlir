// RUN: lazymlir-opt %s --verify-diagnostics --lazymlir-guard-donated-writes > /dev/null

// A check after the first write into a donated argument: refused (the
// runtime then compiles the graph without donation).
memref.global @__lazymlir_check_failed : memref<i32> = dense<0>
#map = affine_map<(d0) -> (d0)>
func.func @main(%arg0: memref<8xf32> {lazymlir.donated}, %arg1: memref<8xi64>) {
  linalg.generic {indexing_maps = [#map], iterator_types = ["parallel"]} outs(%arg0 : memref<8xf32>) {
  ^bb0(%o: f32):
    %s = arith.addf %o, %o : f32
    linalg.yield %s : f32
  }
  // expected-error @+1 {{a runtime check runs after the first write into a donated argument}}
  linalg.generic {indexing_maps = [#map], iterator_types = ["parallel"]} ins(%arg1 : memref<8xi64>) {
  ^bb0(%i: i64):
    %c8 = arith.constant 8 : i64
    %bad = arith.cmpi uge, %i, %c8 : i64
    scf.if %bad {
      %flag = memref.get_global @__lazymlir_check_failed : memref<i32>
      %one = arith.constant 1 : i32
      memref.store %one, %flag[] : memref<i32>
    }
    linalg.yield
  }
  return
}

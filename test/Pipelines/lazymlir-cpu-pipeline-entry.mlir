// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="entry=forward" | FileCheck %s
// RUN: not lazymlir-opt %s --lazymlir-cpu-pipeline 2>&1 | FileCheck %s --check-prefix=MAIN

// The pipeline's entry option reaches every pass that looks for the entry:
// the contract check accepts @forward, its kernels are counted and outlined,
// and its result becomes an out-parameter (input and output descriptors),
// announced to the runtime (its aligned pointer) before the kernel writes it.
// CHECK: module attributes {lazymlir.kernel_count = 1 : i64}
// CHECK: llvm.func @forward(%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: !llvm.ptr, %[[OUT:.+]]: !llvm.ptr, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64)
// CHECK-NEXT: %[[P:.+]] = llvm.ptrtoint %[[OUT]] : !llvm.ptr to i64
// CHECK-NEXT: llvm.call @lazymlir_output_ready(%[[P]]) : (i64) -> ()
// CHECK-NEXT: llvm.call @[[KERNEL:__lazymlir_k_[0-9a-f]{32}]](
// CHECK: llvm.func @[[KERNEL]]({{.*}}) attributes {lazymlir.kernel, sym_visibility = "private"}
// MAIN: error: entry function 'main' not found
#map = affine_map<(d0) -> (d0)>
func.func @forward(%arg0: tensor<64xf32>) -> tensor<64xf32> {
  %e = tensor.empty() : tensor<64xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %in : f32
    linalg.yield %1 : f32
  } -> tensor<64xf32>
  return %0 : tensor<64xf32>
}

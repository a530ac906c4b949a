// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline | FileCheck %s --check-prefix=DEFAULT
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="streaming-store-bytes=65536" | FileCheck %s --check-prefix=STREAM
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="use-ldexp=true" | FileCheck %s --check-prefix=LDEXP
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="threads=2" | FileCheck %s --check-prefix=PARALLEL
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="threads=2 parallel-threshold=1048576" | FileCheck %s --check-prefix=SMALL
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="threads=2 streaming-store-bytes=65536" | FileCheck %s --check-prefix=STREAMPAR
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="profile=true" | FileCheck %s --check-prefix=PROFILE
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline | FileCheck %s --check-prefix=NOPROFILE
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline --mlir-print-local-scope | FileCheck %s --check-prefix=VECTORS
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="vector-width=0" | FileCheck %s --check-prefix=NOVECTORS

// exp of a 256x1024 f32 tensor (1 MiB, 262144 points). By default: below
// the 16 MiB streaming threshold, exp without ldexp, sequential.
// profile: the kernel call is timed and listed (lazymlir-instrument-kernels).
// PROFILE: lazymlir.profile_sites = [{bytes = 2097152 : i64
// PROFILE: llvm.call @__lazymlir_profile_begin(
// PROFILE-NEXT: llvm.call @__lazymlir_k_
// PROFILE-NEXT: llvm.call @__lazymlir_profile_end(
// NOPROFILE-NOT: lazymlir_profile
// DEFAULT-LABEL: llvm.func @__lazymlir_k_
// DEFAULT-NOT: nontemporal
// DEFAULT-NOT: ldexp
// DEFAULT-NOT: omp.parallel
// DEFAULT: llvm.return
// streaming-store-bytes below the output's size: aligned non-temporal
// vector stores (lazymlir-streaming-stores).
// STREAM-LABEL: llvm.func @__lazymlir_k_
// STREAM: llvm.store {{.*}} {alignment = 64 : i64, nontemporal} : vector<16xf32>, !llvm.ptr
// use-ldexp: exp's 2^n factor through llvm.intr.ldexp
// (lazymlir-approximate-math).
// LDEXP-LABEL: llvm.func @__lazymlir_k_
// LDEXP: llvm.intr.ldexp
// With 2 threads the kernel (above the default threshold, 65536 points)
// runs in parallel; with a threshold above its size it does not.
// PARALLEL-LABEL: llvm.func @__lazymlir_k_
// PARALLEL: omp.parallel
// SMALL-LABEL: llvm.func @__lazymlir_k_
// SMALL-NOT: omp.parallel
// SMALL: llvm.return
// With 2 threads the streaming vector nest runs in parallel too
// (lazymlir-streaming-stores' parallel-threshold): its non-temporal stores
// are inside the first OpenMP loop.
// STREAMPAR-LABEL: llvm.func @__lazymlir_k_
// STREAMPAR: omp.parallel
// STREAMPAR: nontemporal
// vector-width (8 by default; the runtime sets the host's): the kernel's
// innermost loop asks LLVM for vectors of that width, on its latch branch
// (lazymlir-lower-to-loops); with 0, LLVM's cost model decides alone.
// VECTORS-LABEL: llvm.func @__lazymlir_k_
// VECTORS: llvm.br {{.*}} {loop_annotation = #llvm.loop_annotation<vectorize = <disable = false, width = 8 : i32>>}
// NOVECTORS-NOT: loop_annotation
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%arg0: tensor<256x1024xf32>) -> tensor<256x1024xf32> {
  %e = tensor.empty() : tensor<256x1024xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<256x1024xf32>) outs(%e : tensor<256x1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = math.exp %in : f32
    linalg.yield %1 : f32
  } -> tensor<256x1024xf32>
  return %0 : tensor<256x1024xf32>
}

// REQUIRES: libdevice, ptxas
// RUN: lazymlir-opt %s --split-input-file --lazymlir-gpu-pipeline="libdevice=%libdevice" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --lazymlir-gpu-pipeline="chip=sm_80 libdevice=%libdevice" | FileCheck %s --check-prefix=SM80
// ptxas assembles what the pipeline emits (the first case, for sm_90):
// RUN: lazymlir-opt %s --split-input-file --lazymlir-gpu-pipeline="libdevice=%libdevice" -o %t.mlir
// RUN: %python %S/Inputs/ptx_of.py %t.mlir %t.ptx
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin

// A fused elementwise chain (mul, add, exp, max) is one kernel: 256 threads
// per block on the innermost dimension (coalesced), one block per 256
// elements of a row; exp calls libdevice, which is linked in (no .extern
// left in the PTX). The host function launches it on the out-parameter.
// The launch plan (lazymlir-gpu-launch-plan; JSON, quotes escaped as \22):
// three buffers, one launch of the kernel on them, its PTX.
// CHECK:       lazymlir.launch_plan = "{\22arguments\22:[{\22dtype\22:\22float32\22,\22offset\22:0,\22shape\22:[128,512],\22strides\22:[512,1]},{{.*}}\22format\22:\22lazymlir-gpu-plan\22,\22modules\22:{\22main_kernel\22:{\22check_flag\22:false,\22chip\22:\22sm_90\22,\22ptx\22:{{.*}}.visible .entry main_kernel({{.*}}\22steps\22:[{\22args\22:[{\22i64\22:1},{\22i64\22:256},{\22buffer\22:0},{\22buffer\22:1},{\22buffer\22:2}],\22block\22:[256,1,1],\22grid\22:[2,128,1],\22kernel\22:\22main_kernel\22,\22module\22:\22main_kernel\22,\22op\22:\22launch\22}],\22version\22:1}"
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:.*]]: memref<128x512xf32>, %[[Y:.*]]: memref<512xf32>, %[[OUT:.*]]: memref<128x512xf32>)
// CHECK:         gpu.launch_func @main_kernel::@main_kernel blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%c256, %c1, %c1)
// CHECK-SAME:      %[[X]] : memref<128x512xf32>, %[[Y]] : memref<512xf32>, %[[OUT]] : memref<128x512xf32>
// CHECK-NOT:     gpu.launch_func
// CHECK:       gpu.binary @main_kernel
// CHECK-SAME:    #nvvm.target<O = 3, chip = "sm_90", features = "+ptx78"
// CHECK-SAME:    .target sm_90
// CHECK-SAME:    .visible .entry main_kernel(
// CHECK-SAME:    %tid.x
// CHECK-SAME:    ld.global
// CHECK-SAME:    ex2.approx
// CHECK-SAME:    st.global
// CHECK-NOT:     .extern
// SM80-LABEL: func.func @main(
// SM80:       gpu.binary @main_kernel
// SM80-SAME:    chip = "sm_80", features = "+ptx70"
// SM80-SAME:    .target sm_80
func.func @main(%x: tensor<128x512xf32>, %y: tensor<512xf32>) -> tensor<128x512xf32> {
  %c = arith.constant 0.5 : f32
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x512xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %y : tensor<128x512xf32>, tensor<512xf32>) outs(%e : tensor<128x512xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %m, %b : f32
    linalg.yield %s : f32
  } -> tensor<128x512xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<128x512xf32>) outs(%e : tensor<128x512xf32>) {
  ^bb0(%a: f32, %o: f32):
    %x1 = math.exp %a : f32
    %r = arith.maximumf %x1, %z : f32
    linalg.yield %r : f32
  } -> tensor<128x512xf32>
  return %1 : tensor<128x512xf32>
}

// -----

// A row sum: the accumulator's fill, then one thread per row (a loop over
// the row in each thread, the accumulator in a register: one store after
// the loop; block reductions are to come), rows spread over 256-thread
// blocks.
// CHECK-LABEL: func.func @main(
// CHECK:         gpu.launch_func @main_kernel::@main_kernel blocks in (%c4, %c1, %c1) threads in (%c256, %c1, %c1)
// CHECK:         gpu.launch_func @main_kernel_0::@main_kernel blocks in (%c4, %c1, %c1) threads in (%c256, %c1, %c1)
// CHECK:       gpu.binary @main_kernel_0
// CHECK-SAME:    .visible .entry main_kernel(
// CHECK-SAME:    $L__BB0_1:
// CHECK-NOT:     st.global
// CHECK-SAME:    add.rn.f32
// CHECK-NOT:     st.global
// CHECK-SAME:    bra
// CHECK-SAME:    st.global
// CHECK-NOT:     .extern
func.func @main(%x: tensor<1024x64xf32>) -> tensor<1024xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1024xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1024xf32>) -> tensor<1024xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<1024x64xf32>) outs(%f : tensor<1024xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<1024xf32>
  return %0 : tensor<1024xf32>
}

// -----

// A full sum has no parallel loop: it runs as a kernel of one thread (the
// host function only launches). A gather by data-dependent indices is
// checked (lazymlir-guard-runtime-checks, the check hoisted into a
// reduction over the indices, here run by the one-thread kernel): an index
// out of range reads element 0 and sets the kernel module's own flag global,
// which the runtime reads back; nothing aborts (no __assertfail).
// CHECK-LABEL: func.func @main(
// CHECK:         gpu.launch_func @main_kernel::@main_kernel blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
// CHECK:         gpu.launch_func @main_kernel_0::@main_kernel
// CHECK-NOT:     memref.load
// CHECK-NOT:     scf.for
// CHECK:         return
// CHECK-NOT:     __assertfail
// CHECK:       gpu.binary @main_kernel
// CHECK-SAME:    .visible .global .align 4 .u32 __lazymlir_check_failed
// CHECK-NOT:     __assertfail
func.func @main(%x: tensor<1024xf32>, %table: tensor<100xf32>, %idx: tensor<64xi64>) -> (tensor<f32>, tensor<64xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %sum = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>], iterator_types = ["reduction"]} ins(%x : tensor<1024xf32>) outs(%f : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  %e2 = tensor.empty() : tensor<64xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%idx : tensor<64xi64>) outs(%e2 : tensor<64xf32>) {
  ^bb0(%i: i64, %o: f32):
    %j = arith.index_cast %i : i64 to index
    %v = tensor.extract %table[%j] : tensor<100xf32>
    linalg.yield %v : f32
  } -> tensor<64xf32>
  return %sum, %g : tensor<f32>, tensor<64xf32>
}

// -----

// An integer absolute value (T5's relative position buckets): NVVM's
// lowering has none, LLVM's abs intrinsic takes it (convert-math-to-llvm
// after the NVVM conversion).
// CHECK-LABEL: func.func @main(
// CHECK:       gpu.binary @main_kernel
// CHECK-SAME:    abs.s64
func.func @main(%x: tensor<64xi64>) -> tensor<64xi64> {
  %e = tensor.empty() : tensor<64xi64>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<64xi64>) outs(%e : tensor<64xi64>) {
  ^bb0(%a: i64, %o: i64):
    %b = math.absi %a : i64
    linalg.yield %b : i64
  } -> tensor<64xi64>
  return %r : tensor<64xi64>
}

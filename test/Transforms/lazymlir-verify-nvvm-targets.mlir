// RUN: lazymlir-opt %s --split-input-file --lazymlir-verify-nvvm-targets -verify-diagnostics | FileCheck %s

// A target LLVM's NVPTX backend takes, and a module that needs no libdevice:
// unchanged.
// CHECK-LABEL: gpu.module @fine
module attributes {gpu.container_module} {
  gpu.module @fine [#nvvm.target<chip = "sm_90", features = "+ptx80">] {
    llvm.func @k() attributes {gpu.kernel, nvvm.kernel} {
      llvm.return
    }
  }
}

// -----

// An architecture CUDA 13's ptxas does not assemble.
module attributes {gpu.container_module} {
  // expected-error @below {{unsupported chip 'sm_50'}}
  gpu.module @old [#nvvm.target<chip = "sm_50", features = "+ptx70">] {
  }
}

// -----

// PTX 6.0 for sm_90: LLVM would abort the process
// ("PTX version 6.0 does not support target 'sm_90'").
module attributes {gpu.container_module} {
  // expected-error @below {{PTX 6.0 does not support sm_90 (it needs +ptx78 or later)}}
  gpu.module @low [#nvvm.target<chip = "sm_90", features = "+ptx60">] {
  }
}

// -----

module attributes {gpu.container_module} {
  // expected-error @below {{name no PTX version (+ptxNN; at least +ptx70 for sm_80)}}
  gpu.module @unnamed [#nvvm.target<chip = "sm_80", features = "">] {
  }
}

// -----

// exp calls libdevice's __nv_expf: without libdevice linked, ptxas would
// reject the PTX (an unresolved .extern).
module attributes {gpu.container_module} {
  // expected-error @below {{the kernels call libdevice (__nv_expf) but no libdevice is linked}}
  gpu.module @math [#nvvm.target<chip = "sm_90", features = "+ptx78">] {
    llvm.func @__nv_expf(f32) -> f32
    llvm.func @k(%x: f32) attributes {gpu.kernel, nvvm.kernel} {
      %0 = llvm.call @__nv_expf(%x) : (f32) -> f32
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  // expected-error @below {{linked file '/nonexistent/libdevice.10.bc' does not exist}}
  gpu.module @missing [#nvvm.target<chip = "sm_90", features = "+ptx78", link = ["/nonexistent/libdevice.10.bc"]>] {
  }
}

// RUN: lazymlir-opt %s --lazymlir-noalias-allocations --split-input-file --verify-diagnostics | FileCheck %s

// The runtime's allocation functions return memory no other pointer reaches:
// their results become noalias (LLVM then hoists loads of temporaries over
// stores to a kernel's outputs). Other functions are left alone.
// CHECK: llvm.func @_mlir_memref_to_llvm_aligned_alloc(i64, i64) -> (!llvm.ptr {llvm.noalias})
// CHECK: llvm.func @_mlir_memref_to_llvm_alloc(i64) -> (!llvm.ptr {llvm.noalias})
// CHECK: llvm.func @other(i64) -> !llvm.ptr
// CHECK: llvm.func @_mlir_memref_to_llvm_free(!llvm.ptr)
module {
  llvm.func @_mlir_memref_to_llvm_aligned_alloc(i64, i64) -> !llvm.ptr
  llvm.func @_mlir_memref_to_llvm_alloc(i64) -> !llvm.ptr
  llvm.func @other(i64) -> !llvm.ptr
  llvm.func @_mlir_memref_to_llvm_free(!llvm.ptr)
}

// -----

// A declaration that does not return a pointer is a diagnostic, not a crash.
module {
  // expected-error @below {{an allocation function that does not return a pointer}}
  llvm.func @_mlir_memref_to_llvm_alloc(i64) -> i64
}

// RUN: lazymlir-opt %s --split-input-file --lazymlir-gpu-launch-plan -verify-diagnostics | FileCheck %s

// Allocation, views, a contiguous copy and a launch: the plan, in order
// (JSON keys sorted; quotes escaped as \22).
// CHECK: lazymlir.launch_plan = "{\22arguments\22:[{\22dtype\22:\22float32\22,\22offset\22:0,\22shape\22:[4,8],\22strides\22:[8,1]}],\22entry\22:\22main\22,\22format\22:\22lazymlir-gpu-plan\22,\22modules\22:{\22k\22:{\22check_flag\22:false,\22chip\22:\22sm_90\22,\22ptx\22:\22.version 7.8\22}},\22steps\22:[{\22buffer\22:1,\22layout\22:{\22dtype\22:\22float32\22,\22offset\22:0,\22shape\22:[32],\22strides\22:[1]},\22op\22:\22alloc\22},{\22buffer\22:2,\22layout\22:{\22dtype\22:\22float32\22,\22offset\22:0,\22shape\22:[4,8],\22strides\22:[8,1]},\22op\22:\22view\22,\22source\22:1},{\22op\22:\22copy\22,\22source\22:0,\22target\22:2},{\22args\22:[{\22i64\22:32},{\22buffer\22:1},{\22f32\22:0.5}],\22block\22:[32,1,1],\22grid\22:[1,1,1],\22kernel\22:\22k\22,\22module\22:\22k\22,\22op\22:\22launch\22}],\22version\22:1}"
module attributes {gpu.container_module} {
  gpu.binary @k [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx78">, assembly = ".version 7.8">]
  func.func @main(%x: memref<4x8xf32>) {
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    %half = arith.constant 0.5 : f32
    %t = memref.alloc() : memref<32xf32>
    %v = memref.expand_shape %t [[0, 1]] output_shape [4, 8] : memref<32xf32> into memref<4x8xf32>
    memref.copy %x, %v : memref<4x8xf32> to memref<4x8xf32>
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c32, %c1, %c1) args(%c32 : index, %t : memref<32xf32>, %half : f32)
    return
  }
}

// -----

// Work left on the host: no plan.
module attributes {gpu.container_module} {
  func.func @main(%x: memref<8xf32>) {
    %c0 = arith.constant 0 : index
    %z = arith.constant 0.0 : f32
    // expected-error @below {{work left on the host}}
    memref.store %z, %x[%c0] : memref<8xf32>
    return
  }
}

// -----

module attributes {gpu.container_module} {
  // expected-error @below {{a buffer of dynamic shape or layout}}
  func.func @main(%x: memref<?xf32>) {
    return
  }
}

// -----

// Boolean constants are a byte per element (DenseElementsAttr packs i1 bits):
// a splat true is four 0x01 bytes ("AQEBAQ=="), a mixed mask its values
// ("AQABAQ==": true, false, true, true), never the packed bits.
// CHECK: lazymlir.launch_plan = "{{.*}}\22data\22:\22AQEBAQ==\22{{.*}}\22data\22:\22AQABAQ==\22
module attributes {gpu.container_module} {
  gpu.binary @k [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx78">, assembly = ".version 7.8">]
  memref.global "private" constant @all : memref<4xi1> = dense<true>
  memref.global "private" constant @mixed : memref<4xi1> = dense<[true, false, true, true]>
  func.func @main(%x: memref<4xi1>) {
    %c1 = arith.constant 1 : index
    %a = memref.get_global @all : memref<4xi1>
    %m = memref.get_global @mixed : memref<4xi1>
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<4xi1>, %m : memref<4xi1>, %x : memref<4xi1>)
    return
  }
}

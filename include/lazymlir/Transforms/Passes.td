//===- Passes.td - lazymlir transformation passes ----------*- tablegen -*-===//

#ifndef LAZYMLIR_TRANSFORMS_PASSES
#define LAZYMLIR_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def VerifyBackendContractPass
    : Pass<"lazymlir-verify-backend-contract", "mlir::ModuleOp"> {
  let summary = "Check that a module is linalg-on-tensors the lazymlir "
                "backend can compile and call";
  let description = [{
    The contract between torch-mlir's frontend and lazymlir's backend is
    textual linalg-on-tensors IR (DESIGN.md, decision 1). The runtime calls
    one entry function with torch buffers, so its signature must be something
    a torch tensor can be passed as: ranked tensors of static shape whose
    element type the runtime maps to a torch dtype. This pass rejects anything
    else with a diagnostic on the offending argument or result, so that a
    coverage gap surfaces as a clear error (and an eager fallback in the lazy
    device) instead of a failure deep inside bufferization or the JIT.

    Checked: the entry function exists, is public and has a body; every
    argument and result is a ranked, statically shaped tensor of
    f16/bf16/f32/f64 or i1/i8/i16/i32/i64; no op in the module still works on
    torch-dialect types (an unfinished frontend lowering).
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Name of the function the runtime calls">,
  ];
}

def FuseElementwisePass
    : Pass<"lazymlir-fuse-elementwise", "mlir::func::FuncOp"> {
  let summary = "Fuse elementwise linalg producers into their consumers";
  let description = [{
    A lazy trace is mostly chains of small elementwise ops; run one by one,
    each reads and writes its whole tensor. This pass turns a chain into one
    loop nest that reads each input once and writes each output once.

    Non-contraction named ops (fill, broadcast, transpose, elementwise named
    ops) are generalized first, since fusion works on linalg.generic; matmul
    and convolutions stay named for later tiling. Then elementwise producers
    are fused into consumers (elementwise ops and reductions), expand/collapse
    reshapes are propagated through elementwise ops so they do not split a
    chain, and the result is canonicalized.

    Policy (the ControlFusionFn): a producer whose only user is the consumer
    is always fused: nothing is recomputed. A producer with several users is
    kept for them, so fusing it recomputes its body in each fused consumer;
    that is done only when its body has at most `max-recompute-ops`
    operations. The same bound applies when the consumer reads the producer
    through a broadcast (the body would run once per broadcast element
    instead of once per producer element).
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect", "mlir::tensor::TensorDialect",
    "mlir::affine::AffineDialect", "mlir::arith::ArithDialect",
  ];
  let options = [
    Option<"maxRecomputeOps", "max-recompute-ops", "unsigned", /*default=*/"4",
           "Largest producer body (in ops, yield excluded) that may be "
           "recomputed in a fused consumer">,
    Option<"propagateReshapes", "propagate-reshapes", "bool", /*default=*/"true",
           "Move expand/collapse reshapes through elementwise ops">,
  ];
}

#endif // LAZYMLIR_TRANSFORMS_PASSES

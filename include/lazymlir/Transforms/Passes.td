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
    textual linalg-on-tensors IR ([DESIGN.md](DESIGN.md#decisions), decision
    1). The runtime calls one entry function (`entry`) with torch buffers, so
    its signature must be something a torch tensor can be passed as: ranked
    tensors, without an encoding, whose element type the runtime maps to a
    torch dtype. Dimensions may be dynamic (`?`): each run's buffers give
    their sizes. This pass rejects anything else with a diagnostic on the
    entry function that names the offending argument or result, so that a
    coverage gap surfaces as a clear error (and an eager fallback in the lazy
    device) instead of a failure deep inside bufferization or the JIT.

    Checked: the entry function exists, is public and has a body; every
    argument and result is a ranked tensor without an encoding, of
    f16/bf16/f32/f64 or signless i1/i8/i16/i32/i64; no op in the module
    still has an operand or result of a torch-dialect type (an unfinished
    frontend lowering); no op is unregistered (the runtime parses with
    unregistered dialects allowed for torch-mlir's TMTensor ops, which
    lazymlir-lower-tm-tensor lowers first).
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Name of the function the runtime calls">,
  ];
}

def GuardRuntimeChecksPass
    : Pass<"lazymlir-guard-runtime-checks", "mlir::ModuleOp"> {
  let summary = "Make data-dependent accesses and integer divisions safe; "
                "record violations in a flag instead of aborting";
  let description = [{
    Compiled code must never read or write outside its buffers, trap or
    abort the process ([DESIGN.md](DESIGN.md#decisions), decision 5).
    torch-mlir's linalg reads indexed elements with `tensor.extract` at
    indices read from tensors (embedding, gather, index_select, t[idx],
    take), sometimes behind a `cf.assert` (which aborts), sometimes
    unchecked; integer division and remainder trap on x86 for a zero divisor
    or INT_MIN / -1.

    This pass rewrites, anywhere in the module (linalg bodies included):

    - every `tensor.extract` / `tensor.insert` index that is data-dependent
      (its backward slice reaches a value read from memory: a block argument
      bound to a linalg operand, a function argument, a tensor.extract
      result, ...; not just linalg.index, constants, dims and arithmetic on
      them) is replaced by 0 when it is not in [0, dim) (one unsigned
      compare) and the check flag is set. Along a dimension of size 0 every
      such access fails: an extract yields 0 instead, an insert leaves its
      destination unchanged. Extracts whose indices are not data-dependent
      (pads, upsampling, ...) are left alone;
    - every `cf.assert` becomes "if !cond: set the flag";
    - integer `arith.divsi/divui/remsi/remui/floordivsi/ceildivsi` whose
      divisor is not a non-zero constant (nor -1 for the signed ones) divide
      by 1 instead of 0 (setting the flag) and instead of -1 when the
      dividend is INT_MIN (the wrapped result, no flag);
    - an integer floor division computed in floating point (torch-mlir's
      `fptosi(floor(sitofp(a) / sitofp(b)))`, or with trunc, ceil or round)
      sets the flag when b is 0 and divides by 1.0 instead where nothing else
      reads the quotient.

    The flag is the public `memref.global @__lazymlir_check_failed :
    memref<i32>`, stored to (1) inside `scf.if` only when a check fails. A
    check inside a linalg.generic body that depends on one input element
    alone (embedding's, gather's, x[idx]'s indices; a divisor only when it
    is broadcast along a loop dimension) is hoisted: a reduction over that
    input ORs it before the op, and the flag is stored once after it, so the
    body keeps its clamps (selects) but no branch or store and still
    vectorizes (with the store in the body, x[idx]'s row copies were not
    vectorized: 3x slower). An input with a dynamic (`?`) dimension keeps
    its checks in the body, with a remark. Other checks store in place (a
    kernel whose body stores stays scalar but correct, in parallel loops
    too: the stores race benignly, all writing 1). A divisor read once per
    element is checked in place: an extra pass over the divisors cost more
    (a // b on 1M int64, one thread: 1.6x the unchecked time hoisted, 1.04x
    in place). A module that needs no check gets no global.

    The runtime reads and resets the flag after each run and raises
    `CheckFailed`; the lazy device then reruns the graph eagerly, so the
    user gets eager's exception (or values).
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::memref::MemRefDialect",
    "mlir::scf::SCFDialect", "mlir::tensor::TensorDialect",
  ];
}

def LowerTMTensorPass
    : Pass<"lazymlir-lower-tm-tensor", "mlir::ModuleOp"> {
  let summary = "Lower torch-mlir's TMTensor scatter, scan and sort ops "
                "(parsed as unregistered ops) to scf loops over tensors";
  let description = [{
    torch-mlir lowers index_put, scatter, scatter_add, scatter_reduce,
    index_add, embedding_dense_backward (tm_tensor.scatter), cumsum and the
    bool-mask index_put's nonzero (tm_tensor.scan), and sort / topk / argsort
    (tm_tensor.sort) to its own TMTensor dialect, which MLIR 22 does not
    know. The frontend prints such modules in the generic op form and the
    runtime parses them with unregistered dialects allowed; this pass
    rewrites those ops by name into scf.for loops over tensors
    (tensor.extract / tensor.insert on loop-carried tensors, which one-shot
    bufferization updates in place), inlining the op's combiner or
    comparator region.

    scatter skips updates whose position falls outside the original (never
    writes out of bounds) and fails a `cf.assert` for them (which
    lazymlir-guard-runtime-checks turns into its flag); scan is a sequential
    loop along its dimension (a fill of its output, which every element
    overwrites, is skipped); sort is a bottom-up merge sort per slice that
    takes the left element iff comparator(left, right) (stable for
    torch.sort's non-strict comparators). A splat-constant destination
    becomes a fill of a new tensor. A destination that is a function
    argument is written as it is: lazymlir-readonly-arguments marks the
    entry's arguments not writable, so bufferization copies it first and the
    caller's tensor is never written.

    Dynamic (`?`) sizes are read with `tensor.dim` and the loops run to
    them; a scan of dynamic length runs under a check that the length is
    positive. Refused with a diagnostic (the graph then compiles with static
    shapes): sorting along a `?` dimension, a `?` index depth, an update
    slice of `?` size in a dimension that is not indexed (it could write
    past the original). Any other tm_tensor op is an error; the backend
    contract check (run after this pass) rejects every unregistered op that
    remains.
  }];
  let dependentDialects = [
    "mlir::scf::SCFDialect", "mlir::tensor::TensorDialect",
    "mlir::arith::ArithDialect", "mlir::linalg::LinalgDialect",
    "mlir::bufferization::BufferizationDialect",
    "mlir::cf::ControlFlowDialect",
  ];
}

def FuseElementwisePass
    : Pass<"lazymlir-fuse-elementwise", "mlir::func::FuncOp"> {
  let summary = "Fuse elementwise linalg producers into their consumers";
  let description = [{
    A lazy trace is mostly chains of small elementwise ops; run one by one,
    each reads and writes its whole tensor. This pass turns a chain into one
    loop nest that reads each input once and writes each output once.

    Named ops other than contractions, convolutions, fills and
    linalg.softmax (broadcast, transpose, reductions, elementwise named ops)
    are generalized first, since fusion works on linalg.generic; matmul and
    convolutions stay named for later tiling, fills because they initialize
    accumulators (outs), which elementwise fusion never fuses into. In the
    same step, torch-mlir's guards of an index into a `?` dimension against
    that dimension being 1 (`select(size == 1, 0, i)`, `i mod size`) fold to
    the index when the size is the loop's own trip count, so that the access
    reads contiguously again (a transformer's attention scores were copied
    by a gather at 2 ns an element). Then elementwise producers are fused
    into consumers (elementwise ops and reductions), expand/collapse
    reshapes are propagated through elementwise ops so they do not split a
    chain (`propagate-reshapes`; only out of single-use producers: nothing
    is recomputed), and the result is canonicalized.

    Policy (the ControlFusionFn): a producer whose only user is the consumer
    is always fused: nothing is recomputed. A producer with several users is
    kept for them, so fusing it recomputes its body in each fused consumer;
    that is done only when its body has at most `max-recompute-ops`
    operations. The same bound applies when the consumer reads the producer
    through a broadcast (the body would run once per broadcast element
    instead of once per producer element). Before that: an elementwise
    producer whose result the graph keeps (returned, or read by an op that
    is not linalg) and that an elementwise consumer reads element for
    element, with every other user after the consumer, is fused with its
    result kept as a second result of the fused op: one loop writes both,
    nothing is recomputed (an AdamW update, three loops per parameter with
    the second moment recomputed, 44 bytes of traffic per parameter, became
    one of 28: 164 -> 60 ms for 115M parameters, eager's fused AdamW 64).

    Into a contraction (a matmul that reshape propagation made a
    linalg.generic) only a producer that moves data without computing (a
    transpose: its body is a bare yield) and has no other user is fused, so
    that the contraction reads the operand in place (a producer with other
    users would stay a second result of the fused op); with other ops its
    body would no longer be a multiply-accumulate, lazymlir-tile-contractions
    would not recognize it (scalar loops, tens of times slower), and each
    operand element is read once per tile of the loops the operand does not
    index, recomputing the producer as often. Even such a transpose is fused
    only where reading in place keeps the contraction fast; otherwise it is
    materialized:

    - the innermost parallel loop (the one tiles vectorize) must stay the
      operand's innermost dimension: a B operand read as (n, k) would make
      every vector load a gather;
    - an operand the vectors do not index (A) must still be read with a
      reduction loop innermost: a weight gradient's activations read (k, m)
      in place transposed every tile element by element (61 GFLOP/s against
      168 with the transpose materialized, 512x2048 output, K=4096);
    - every run of reduction loops lazymlir-tile-contractions would merge
      must stay mergeable: GPT-2's attention output read through the
      transpose that merges its heads split the reduction over heads x head
      size into two loops (7 GFLOP/s, against 160 materialized).

    With `runtime-gemms` (the CPU pipeline), a contraction the runtime GEMM
    computes (lazymlir-mark-gemms' test, before and after the fusion) takes
    any such transpose instead, the GEMM packing its operands from any
    strides: a linear layer's weight, which the heads' reshape turned into
    a (k, heads, head size) copy per call, is read where it is. A transpose
    that would make a GEMM's roles no longer read as matrices stays apart.
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
    Option<"runtimeGemms", "runtime-gemms", "bool", /*default=*/"false",
           "Fuse every transpose into a contraction lazymlir-mark-gemms "
           "marks, before and after (the CPU pipeline's runtime GEMM packs "
           "its operands: it reads them transposed in place)">,
  ];
}

def TileContractionsPass
    : Pass<"lazymlir-tile-contractions", "mlir::func::FuncOp"> {
  let summary = "Tile contractions, fuse their fill and elementwise epilogue "
                "into the tile loops, and vectorize the tiles";
  let description = [{
    Contractions (matmul, batch_matmul, contraction linalg.generic ops, and
    convolutions rewritten as im2col + a contraction) lowered to scalar
    loops run at a small fraction of the machine's speed, and their result
    is written to memory only to be re-read by the bias add and activation
    that follow. This pass:

    1. rewrites NCHW 2-D convolutions as im2col followed by a contraction
       (`im2col`), so that they take the same path as matmul; NHWC
       convolutions (lazymlir-channels-last's output) are tiled directly
       instead, their window walked one tap at a time, so that each tile is
       a 1-D convolution the vectorizer handles (no im2col buffer);
    2. merges, in a contraction linalg.generic, each run of adjacent
       reduction loops that every operand reads as one contiguous run into
       one loop (a weight gradient reduced over batch x sequence: two
       reduction loops would vectorize to a two-dimensional reduction, which
       lowers to slow code), and runs of adjacent parallel loops too when no
       epilogue is fused (a projection into attention heads becomes a plain
       matmul whose tiles are full vectors); operands are reshaped, not
       copied, and a run with more than one `?` loop is not merged;
    3. tiles each contraction's parallel loops (the two innermost by
       `tile-m` x `tile-n`, 8 x 32 by default; outer ones by 1), fusing
       what initializes the accumulator (a fill, or an elementwise op such
       as a convolution's bias broadcast) and, when the contraction's only
       user is an elementwise op over the same iteration space (the
       epilogue: bias, activation, residual add, usually one op after
       lazymlir-fuse-elementwise), tiling that consumer instead and fusing
       the contraction into it: each output tile is computed, finished and
       written once; the tile loops are marked `lazymlir.parallel_tiles`
       (with the contraction's iteration points) for
       lazymlir-parallelize-tiles, which may run them in parallel;
       the tile loops visit rows of tiles outside columns, unless B (the
       operand that does not depend on the rows) is larger than
       `stream-bytes` (16 MiB) and than A: then columns outside, so that B
       comes from memory once rather than once per row of tiles;
    4. tiles the reduction loops (the innermost by `tile-k`, others by 1)
       and vectorizes every tile (`vectorize`), leaving vector.contract on
       small static shapes for the vector lowering (outer products, i.e.
       FMAs on registers); the accumulator tile is carried through the
       reduction loop as a vector. Tiles that read or write i1 memory stay
       scalar (vectors of i1 are bit-packed, memory holds bytes).

    Tile sizes are divisors of the (static) loop bounds at most as large as
    the options, so every tile is full and no masking is needed; except the
    innermost parallel loop's (the vectors) when no such divisor is a whole
    number of 8-lane vectors (a vocabulary of 1000: the largest divisor up
    to 32 is 25), and the second-innermost's (the rows) when the largest is
    under half of `tile-m` (a 26-wide convolution output: 2): they are tiled
    by `tile-n` and `tile-m` and their last, partial tiles peeled off, so
    that all tiles have static shapes.

    Dynamic (`?`) loops (batch x sequence, a sequence length) are tiled by
    `tile-m` / `tile-n` / `tile-k` and peeled: full tiles of static shape,
    vectorized as above, then the partial tiles split again: fewer than
    `tile-m` rows into single rows, fewer than `tile-n` columns into 8-lane
    vectors and a last masked 8-lane vector, a dynamic reduction into full
    steps and single steps. Their tile loops are marked with an unknown
    size (i64 max: parallel when threads > 1).

    A convolution with `?` loops (a dynamic batch; the batch as the reduced
    channel of a weight gradient) first has those loops tiled, so that every
    tile is a static convolution that takes the paths above (left whole, it
    lowered to scalar loops: 15-20x slower than its static twin): a parallel
    `?` loop by 1 (a sample at a time; the loop is marked
    `lazymlir.parallel_tiles` with an unknown size), a reduced `?` loop
    sequentially, accumulating into the output, in chunks of `tile-k`
    channels and then single channels for the rest (a channel per step left
    each tile a K=1 contraction). When only parallel loops are dynamic and
    the convolution has an elementwise epilogue (bias, ReLU), the epilogue
    is tiled over them and the convolution fused into it, as static
    convolutions' epilogues are. A convolution that still has `?` loops is
    left alone, with a remark.
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect", "mlir::tensor::TensorDialect",
    "mlir::scf::SCFDialect", "mlir::vector::VectorDialect",
    "mlir::affine::AffineDialect", "mlir::arith::ArithDialect",
  ];
  let options = [
    Option<"tileM", "tile-m", "unsigned", /*default=*/"8",
           "Largest tile of the second-innermost parallel loop">,
    Option<"tileN", "tile-n", "unsigned", /*default=*/"32",
           "Largest tile of the innermost parallel loop (the vector width)">,
    Option<"tileK", "tile-k", "unsigned", /*default=*/"8",
           "Largest tile of the innermost reduction loop">,
    Option<"fuseEpilogue", "fuse-epilogue", "bool", /*default=*/"true",
           "Tile an elementwise epilogue with its contraction">,
    Option<"im2col", "im2col", "bool", /*default=*/"true",
           "Rewrite 2-D convolutions as im2col + contraction first">,
    Option<"vectorize", "vectorize", "bool", /*default=*/"true",
           "Vectorize the tiles">,
    Option<"streamBytes", "stream-bytes", "int64_t", /*default=*/"16777216",
           "Visit the column tiles outside the row tiles when B (the "
           "operand that does not depend on the rows) is larger than this "
           "many bytes and than A: B is then read once instead of once per "
           "row of tiles">,
  ];
}

def FuseRowReductionsPass
    : Pass<"lazymlir-fuse-row-reductions", "mlir::func::FuncOp"> {
  let summary = "Run row reductions and the pass that consumes them row "
                "tile by row tile, in one loop nest";
  let description = [{
    After lazymlir-fuse-elementwise, softmax is three loop nests over the
    whole tensor: the row maxima, the row sums of exp(x - max), and the
    normalizing pass that reads the input again; layer norm (its moments,
    then the normalization) is similar. Each streams the tensor from memory.
    This pass tiles the consumer (an all-parallel linalg.generic with one
    output) along its first loop and fuses into the tile loop the
    reductions, fills and elementwise ops it reads from, so that each tile
    of rows is reduced and normalized while it is in cache: one pass over
    memory instead of one per reduction plus one, and softmax or layer norm
    is one kernel.

    Unit dimensions of reductions and of their direct consumers are dropped
    first (torch-mlir's keepdim reductions index their 4096x1 results as
    (d0, 0), which tiling cannot slice). An op is fused when all of its
    users are fused (nothing is computed twice for other users) and it is
    "row-local": its first loop is parallel with the consumer's first loop's
    size, and every operand it shares with the fused ops and every output is
    indexed by that loop first; a reduction must read all its operands by
    rows (one that reads an operand across rows is a contraction, which is
    lazymlir-tile-contractions' job and raced between the loop's threads).
    At least one fused op must be a reduction. A tile has the fewest rows (a
    divisor of the first loop's size) whose slice of the consumer's largest
    input reaches `tile-bytes` (4 KiB by default: one row of 1024 floats,
    which the tile's passes then read from L1; with 64 KiB tiles, layer norm
    4096x1024 out of cache took 1.08-1.11x eager's time, with 4 KiB
    0.99-1.00x, softmax 1.05-1.12x against 1.01-1.12x, the transformer
    training steps unchanged); the tile loop is marked
    `lazymlir.parallel_tiles` for lazymlir-parallelize-tiles. With
    `runtime-gemms` (the CPU pipeline), a contraction lazymlir-mark-gemms
    would mark is never fused: attention's batched matmuls (batch x heads of
    128x128x64 in BERT h512) ran in softmax's row loop at 22 GFLOP/s. Also
    with it, a generic that yields a bf16 value widened (`extf(truncf(..))`:
    bf16 attention's probabilities and score gradients) and that such a
    contraction reads is split first: it yields the bf16 value, a widening
    after it (never itself a root) gives the float32 one. The row loop's
    result is then the bf16 value, which lazymlir-mark-gemms'
    `bf16-operands` gives the bf16 GEMM; fused whole, the loop yielded the
    widened value and the product stayed float32.

    A dynamic (`?`) row count is tiled by the rows that fit: full tiles of
    static size (their temporaries too, allocated once per thread), then the
    last, partial tile peeled off. A dynamic row length counts as 1024
    elements.
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect", "mlir::tensor::TensorDialect",
    "mlir::scf::SCFDialect", "mlir::affine::AffineDialect",
    "mlir::arith::ArithDialect",
  ];
  let options = [
    Option<"tileBytes", "tile-bytes", "int64_t", /*default=*/"4096",
           "Bytes of the consumer's largest input a row tile should span">,
    Option<"runtimeGemms", "runtime-gemms", "bool", /*default=*/"false",
           "Leave out of the row loops the contractions lazymlir-mark-gemms "
           "would mark (the CPU pipeline's runtime GEMM computes them)">,
  ];
}

def HoistRedundantTransfersPass
    : Pass<"lazymlir-hoist-redundant-transfers", "mlir::func::FuncOp"> {
  let summary = "Keep loop-carried vector accumulators in registers";
  let description = [{
    After bufferization, a vectorized contraction tile reads its accumulator
    from memory and writes it back in every iteration of the reduction loop.
    This pass hoists such read/write pairs out of the loop (upstream
    linalg::hoistRedundantVectorTransfers, with non-zero trip counts
    verified), so the accumulator stays in registers, then forwards stored
    vectors to the reads that follow and drops dead stores
    (vector::transferOpflowOpt): the epilogue reads the accumulator's last
    value directly, and the per-tile buffer usually disappears.
  }];
}

def ApproximateMathPass
    : Pass<"lazymlir-approximate-math", "mlir::func::FuncOp"> {
  let summary = "Expand f32 transcendental math ops into polynomial "
                "approximations";
  let description = [{
    LLVM has no vector exp, tanh or erf without a vector math library, so a
    loop calling them is not vectorized, and an elementwise chain with a
    sigmoid or a GELU runs at scalar speed. Upstream's polynomial
    approximations (the ones IREE uses on CPUs) are plain arithmetic that
    LLVM vectorizes, accurate to a few ulp in f32. This pass expands the f32
    math ops listed in `ops` (by default exp, expm1, log, log1p, log2, tanh
    and erf) with them. With `use-ldexp` (the runtime sets it when the host
    has AVX-512), scalar f32 exp is our own expansion instead: 2^n applied by
    llvm.intr.ldexp (AVX-512's vscalefps), within 1.01 ulp over the whole
    range, denormal results included, and ~7 instructions shorter. f32 erf
    is ours too: a polynomial in x^2 below 1 and 1 - exp(-x^2) R(1/x) above
    (within 2.4 ulp; no selects between coefficient sets, where upstream's
    rational approximation over three intervals has 15; GELU forward went
    from ~1.5x eager's time to ~0.9x, measured on a loaded host). f64 and
    ops not listed in `ops` keep their libm or intrinsic lowering. sin and
    cos are not listed by default: their range reduction loses accuracy for
    large arguments.

    Special values come out as eager's: vector and non-ldexp f32 exp scale
    by two powers of two (denormal results are not flushed: upstream's
    expansion gave 0 for exp(-100), eager 3.7e-44), f32 log/log2 rescale
    denormal inputs by 2^24, erf keeps the sign of -0.0, and f64 log1p/expm1
    use accurate formulas (log(1+x) and exp(x)-1 lose -0.0 and tiny inputs).
    Whatever `ops` says, `math.fpowi` with a constant exponent in [0, 64]
    becomes multiplications (binary exponentiation, as compiler-rt's powi):
    vectorized, it became llvm.intr.powi with a vector exponent, which the
    LLVM dialect rejects. Negative exponents keep powi (eager's special
    values: `-0.0 ** -1` is -inf).
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::math::MathDialect",
    "mlir::vector::VectorDialect", "mlir::LLVM::LLVMDialect",
  ];
  let options = [
    ListOption<"ops", "ops", "std::string",
               "math ops to approximate (default: exp, expm1, log, log1p, "
               "log2, tanh, erf)">,
    Option<"useLdexp", "use-ldexp", "bool", /*default=*/"false",
           "Expand f32 exp with llvm.intr.ldexp for its 2^n factor: one "
           "vscalefps on AVX-512 (the CPU pipeline turns it on there); "
           "targets without a vector ldexp would call libm per element">,
  ];
}

def MarkGemmsPass : Pass<"lazymlir-mark-gemms", "mlir::func::FuncOp"> {
  let summary = "Mark the float32 contractions the runtime's packed GEMM "
                "computes (lazymlir-gemm-calls makes them calls)";
  let description = [{
    A contraction on tensors of float32 with static shapes whose loops each
    play one role, batch (in A, B and C), rows M (A and C), columns N (B
    and C) or reduction K (A and B), where each role's loops sit side by
    side in each operand in loop order (so that, laid out row by row, they
    read as one dimension: batch x sequence rows, a reduction over batch x
    sequence, a batch of attention heads), and whose M, N and K are at least
    `min-size` and M x N x K at least `min-work`, gets the unit attribute
    `lazymlir.gemm`. lazymlir-tile-contractions leaves such an op alone; after
    bufferization lazymlir-gemm-calls replaces it with a call of the runtime's
    GEMM, whose micro-kernel and cache blocking are chosen on the host that
    runs it (lib/Runtime/Gemm.cpp). Operand transposes are read in place.

    With `bf16-operands` (the CPU pipeline on a host with AVX512-BF16), a
    marked contraction whose A and B are each the result of a
    `linalg.generic` that yields `arith.extf` of a bf16 value (bf16 autocast:
    operands rounded to bf16, widened for a float32 product) reads them in
    bf16: each producer yields the bf16 value into a bf16 tensor, and the
    contraction (generalized) widens them in its body. lazymlir-gemm-calls
    then calls the runtime's bf16 GEMM (its dot-product instructions, float32
    accumulation), and the operands' copies take half the bytes. The values
    are the same; the products are exact in float32 either way. A producer
    with any other user (or a contraction with only one such operand) is
    left as it is.
    A producer that only widens a bf16 value through a permutation (`extf`
    of its one input: a bf16 weight's transposed copy) is not narrowed but
    read in place: the contraction reads its input through the permutation
    composed with its own map, when every role still reads as one
    dimension (a transposed operand the runtime GEMM reads by its strides).

    With `bf16-results` as well, such a contraction whose init is a +0.0
    fill and whose float32 result every reader (each a `linalg.generic`,
    directly or through one reshape) reads only to round it to bf16
    (`arith.truncf`: a linear layer's output under autocast, its input's and
    weight's gradients) yields the bf16 value instead, gets the unit
    attribute `lazymlir.bf16_result`, and its readers read that value where
    they rounded. When its one reader instead rounds the result plus a bf16
    value it widens (a bias: addmm under autocast), that value broadcast in
    bf16 becomes the contraction's init, and the call adds the product to
    it: one float32 addition, rounded once, as before. lazymlir-gemm-calls calls the bf16 GEMM that rounds each
    float32 sum once as it stores it (to nearest even, NaN to 0xFFFF, as
    lazymlir-expand-bf16-conversions rounds a truncf): the same values, and C
    takes half the bytes to write and to read.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::linalg::LinalgDialect",
    "mlir::tensor::TensorDialect",
  ];
  let options = [
    Option<"minSize", "min-size", "int64_t", /*default=*/"16",
           "Smallest M, N and K">,
    Option<"minWork", "min-work", "int64_t", /*default=*/"262144",
           "Smallest M x N x K (64^3 by default)">,
    Option<"bf16Operands", "bf16-operands", "bool", /*default=*/"false",
           "Read A and B in bf16 where their producers widen bf16 values "
           "(the runtime's bf16 GEMM)">,
    Option<"bf16Results", "bf16-results", "bool", /*default=*/"false",
           "With bf16-operands: a result only ever read rounded to bf16 "
           "made bf16, rounded once by the runtime's GEMM">,
  ];
}

def GemmCallsPass : Pass<"lazymlir-gemm-calls", "mlir::ModuleOp"> {
  let summary = "Replace the contractions lazymlir-mark-gemms marked, now on "
                "buffers, with calls of the runtime's GEMM";
  let description = [{
    Each linalg op marked `lazymlir.gemm` becomes a call of
    `lazymlir_sgemm_batched(batch, m, n, k, a, a_batch, a_row, a_col, b,
    b_batch, b_row, b_col, c, c_batch, c_row, c_col, threads)` (all i64,
    declared in the module): addresses of each operand's first element and
    element strides of each role, read from the buffers' static layouts,
    and C += A x B as the op computed (its init is already in C). With A
    and B in bf16 (lazymlir-mark-gemms' `bf16-operands`) and C in float32,
    the call is `lazymlir_bf16gemm_batched`, with the same arguments; with C
    in bf16 too (marked `lazymlir.bf16_result`),
    `lazymlir_bf16gemm_bf16c_batched`. An op whose buffer does not read as a
    matrix (a role's dimensions not contiguous, a dynamic stride) keeps its
    linalg form, with a remark, and becomes loops; one marked
    `lazymlir.bf16_result` is an error instead (its loops would round at
    every step).
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::func::FuncDialect",
    "mlir::memref::MemRefDialect",
  ];
  let options = [
    Option<"threads", "threads", "int64_t", /*default=*/"0",
           "Threads of each call (0: every core)">,
  ];
}

def MergeLoopRunsPass
    : Pass<"lazymlir-merge-loop-runs", "mlir::func::FuncOp"> {
  let summary = "Merge runs of adjacent loops every operand reads "
                "contiguously into one loop";
  let description = [{
    A reduction over the last two dimensions of an NCHW tensor (a
    convolution's bias gradient over 24x24 images) lowers to two nested
    loops of 24: the inner one is too short for LLVM's vectorizer to pay
    off (64x64x24x24 summed over the images: 921 us, against 71 us for one
    576-long loop, eager 66). Each linalg.generic of the function body (not
    those inside tile loops, which tiling passes shaped; not contractions,
    which lazymlir-tile-contractions merges itself) has each run of adjacent
    loops of one kind (all parallel or all reduction) that every operand
    reads either not at all or as one contiguous run, in loop order, merged
    into one loop (upstream linalg::collapseOpIterationDims: operands and
    results are reshaped, not copied).

    A reduction whose inputs all read their dimensions in one order other
    than its loops' first has its loops put in that order (upstream
    linalg::interchangeGenericOp: a bias gradient written over NCHW-ordered
    loops reading NHWC data becomes a column reduction over pixels, which
    lazymlir-vectorize-column-reductions takes: MNIST conv1's bias gradient
    1.2-2.2 ms at 5-9 GB/s, then 0.46 ms at 36 GB/s).

    Left alone: ops whose indexing maps hold anything but plain dimensions
    (a broadcast constant, a convolution's window) and ops that read their
    loop indices (linalg.index: a merged loop's index would be divided back
    into the original ones for every element; pooling's argmax slowed down
    2x). Runs may hold dynamic (`?`) loops, at most one each (a merged
    result is expanded back, and an expand_shape into several `?` sizes is
    what lazymlir-dynamic-expand-shapes has to rewrite).
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect", "mlir::tensor::TensorDialect",
  ];
}

def VectorizeTransposesPass
    : Pass<"lazymlir-vectorize-transposes", "mlir::func::FuncOp"> {
  let summary = "Transpose in 16x16 register blocks";
  let description = [{
    A materialized transpose (a linear layer's weight, w.t(), read as a
    matmul's B operand; NHWC <-> NCHW layout changes around convolutions),
    or an elementwise op that reads an input transposed (a GELU backward
    written transposed for a weight gradient), lowered to loops reads that
    input with a large stride in the innermost loop: 4-7 GB/s. Each
    top-level linalg.generic on tensors with one output written in loop
    order, only parallel loops (at least two), a body of arith and math ops
    only, and an input read transposed (a permutation whose innermost
    dimension is a loop other than the innermost one; every such input read
    with the same loop; other inputs read in loop order or broadcast) is
    tiled 16x16 over that loop and the innermost one (the other loops by 1;
    the tile loops marked `lazymlir.parallel_tiles` for
    lazymlir-parallelize-tiles) and each tile vectorized: contiguous row
    reads, a vector.transpose (lowered to shuffles by the CPU pipeline), the
    body on 16x16 vectors, contiguous row writes. A row broadcast along the
    transposed loop (a bias) becomes one splat per row instead of a
    transpose. Tiled so, transposes run at 35-48 GB/s.

    Both loops must be at least 16 long. When one is not a multiple of 16
    (vocabularies of 1000 or 50257), its last, partial block is peeled off:
    a tile of static shape, vectorized too. A dynamic (`?`) loop is tiled
    the same way, its partial block peeled (scalar). Bool (i1) tensors are
    left alone (their vectors are bit-packed).
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect", "mlir::tensor::TensorDialect",
    "mlir::scf::SCFDialect", "mlir::vector::VectorDialect",
    "mlir::affine::AffineDialect", "mlir::arith::ArithDialect",
  ];
}

def VectorizeColumnReductionsPass
    : Pass<"lazymlir-vectorize-column-reductions", "mlir::func::FuncOp"> {
  let summary = "Sum columns in vector registers";
  let description = [{
    A bias gradient in NHWC (rows of pixels x channels, summed over the
    rows) or over a linear layer's batch x sequence is a column reduction:
    lowered to loops, each row's partial sums were loaded and stored back,
    at 2-9 GB/s. Each top-level linalg.generic on f32 tensors with one
    output, whose loops are reductions outside parallel loops, every operand
    read along the innermost (parallel) loop, and no linalg.index, is tiled:
    the innermost parallel loop by up to 64 (all of it when at most 64, else
    a multiple of 8 dividing it; none: the op is left alone), the innermost
    reduction loop by 8 (a static one must be a multiple of 8), every other
    loop by 1, parallel tile loops outside the reduction ones; each tile is
    vectorized (a vector.multi_reduction over its 8 rows, lowered to
    elementwise vector adds in row order) and the accumulator tile is
    carried through the reduction loops as a vector. An NHWC bias gradient
    of 43264x32: 126 us before, 67 after (eager 70); a linear bias of
    256x512: 73 us before, 13 after (eager 8).

    A dynamic (`?`) row count: full tiles of 8 rows, the rest row by row on
    vectors; dynamic columns are left alone, with a remark.
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect", "mlir::tensor::TensorDialect",
    "mlir::scf::SCFDialect", "mlir::vector::VectorDialect",
    "mlir::affine::AffineDialect", "mlir::arith::ArithDialect",
  ];
}

def ReassociateReductionsPass
    : Pass<"lazymlir-reassociate-reductions", "mlir::func::FuncOp"> {
  let summary = "Let floating-point reduction accumulations be reassociated";
  let description = [{
    A linalg reduction lowers to a loop carrying a scalar accumulator; LLVM
    vectorizes such a loop only if it may reorder the additions. PyTorch's
    own CPU reductions are vectorized (reordered) too, so exact sequential
    order is not what users get in eager either. This pass marks the op that
    combines the accumulator (addf, mulf) in each reduction's body with
    `fastmath<reassoc>`, nothing else: the rest of the body keeps strict
    semantics. The combiner of a max/min reduction (arith.maximumf,
    minimumf) gets `fastmath<nsz>` instead: when -0.0 and +0.0 tie, either
    may come out (so in eager's vectorized max), while a NaN still
    propagates. Without it LLVM orders the zeros in every element's max, six
    instructions instead of three: softmax of 4096x1024 took 15% longer.
  }];
}

def DynamicExpandShapesPass : Pass<"lazymlir-dynamic-expand-shapes"> {
  let summary = "Lower memref.expand_shape into several dynamic sizes as a "
                "reinterpret_cast";
  let description = [{
    MLIR 22's expand-strided-metadata crashes (a null attribute read as an
    integer) on a memref.expand_shape that splits one dimension into two or
    more dynamic (`?`) sizes, e.g. `memref<?x8xf32>` into
    `memref<?x?x8xf32>` (a view of batch x sequence rows back as [batch,
    sequence, ...], which dynamic graphs hold). Before it, this pass
    rewrites each such expand_shape into memref.extract_strided_metadata of
    its source and a memref.reinterpret_cast of the base buffer with the
    output sizes and the strides they imply (within a group, each size's
    stride is the next one's times its size; the last keeps the source
    dimension's stride), cast to the expand_shape's type. Other
    expand_shapes are left to expand-strided-metadata.
  }];
  let dependentDialects = ["mlir::memref::MemRefDialect",
                           "mlir::arith::ArithDialect"];
}

def ExpandBf16ConversionsPass : Pass<"lazymlir-expand-bf16-conversions"> {
  let summary = "Conversions to and from bfloat16 as integer arithmetic";
  let description = [{
    Rewrites `arith.truncf` to `bf16` (from `f32`, or from `f64` through
    `f32`) and `arith.extf` from `bf16` (to `f32` or `f64`), on scalars and
    vectors, into bitcasts, shifts, integer adds and a select. A truncation
    rounds to nearest even as eager's vectorized CPU conversion does (the
    bias `0x7FFF` plus the lowest kept bit, added to the float's bits; a
    carry rounds up into the exponent, to infinity past the largest
    bfloat16) and turns every NaN into `0xFFFF`; an extension moves the
    16 bits to the high half of a float. A truncation with an explicit
    rounding mode is left alone.

    LLVM lowers `fptrunc` to `bfloat` on an x86 host without AVX512-BF16
    (Zen 3) to a call per element (`__truncsfbf2`), which its loop
    vectorizer cannot widen: under bf16 autocast, where every op rounds its
    result to bf16, each elementwise kernel ran one scalar element at a time
    with a call per rounding (GPT-2's GELU over 8x128x2048 elements: 83 ms,
    against 2.6 ms in float32). Integer arithmetic vectorizes like any
    other. Runs before the arith and math dialects are lowered to LLVM.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect"];
}

def ByteBoolAccessesPass : Pass<"lazymlir-byte-bool-accesses"> {
  let summary = "Load and store booleans as the bytes they are in memory";
  let description = [{
    A memref of i1 holds one byte per element (PyTorch's bool layout, and
    the memref lowering's: its GEPs step over i1 by its one-byte alloc
    size), but the LLVM dialect loads and stores it as `i1`. LLVM's loop
    vectorizer cannot widen an `i1` load into a vector load (a `<16 x i1>`
    load reads 16 bits, not 16 bytes), so it gathers every boolean with a
    scalar load and an insertelement: every masked row loop (GPT-2's
    softmax with the causal mask: the all-`-inf` check, max, sum) gathered
    the mask byte by byte, and GPT-2's attention forward kernel took 462 us
    per call, against 128-168 us with this pass. This pass, on the LLVM
    dialect, rewrites each load of `i1` (or of a vector of `i1`) into a load
    of `i8` (or of a vector of `i8`) and a truncation, and each store of an
    `i1` value (or vector) into a zero extension and a store of the bytes.
    Bytes hold 0 or 1, so the values are unchanged; vector loads of i1,
    which would read bits, become correct byte loads.
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

def NoaliasAllocationsPass : Pass<"lazymlir-noalias-allocations", "mlir::ModuleOp"> {
  let summary = "Tell LLVM that the runtime's allocation functions return "
                "fresh memory";
  let description = [{
    Temporaries are allocated through `_mlir_memref_to_llvm_aligned_alloc`
    and `_mlir_memref_to_llvm_alloc` (served by the runtime's buffer pool),
    which LLVM knows nothing about: a store through an argument (a kernel's
    output) might then overwrite a temporary, so LLVM reloads every
    temporary after each store and keeps computations on them inside the
    loop. In a fused layer norm, each 16-float vector of the output
    recomputed its row's 1/sqrt(var + eps) and mean (a square root and
    three divisions). This pass, on the LLVM dialect, marks the result of
    those declarations `noalias` (as malloc's is): the memory they return
    is reachable through no other pointer, which is what the pool
    guarantees, so LLVM hoists the row's values out of the element loop. A
    declaration of either name that does not return a pointer is an error.
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

def GpuSplitReductionsPass
    : Pass<"lazymlir-gpu-split-reductions", "mlir::func::FuncOp"> {
  let summary = "Split long reductions with few outputs into a parallel "
                "partial reduction and a short final one";
  let description = [{
    On the GPU each output element of a reduction is one thread: a loss, a
    `.sum()` of a weight gradient or a norm is one thread looping over the
    whole tensor. This pass (GPU pipeline, on tensors, after fusion; a
    reduction's runs of loops first merged by lazymlir-merge-loop-runs)
    rewrites each linalg.generic of static shape with one output, one
    reduction loop of at least `min-length` iterations and fewer than
    `max-outputs` output elements with upstream linalg::splitReduction: the
    reduction loop of length K becomes R parallel partial reductions (R the
    largest divisor of K up to `ratio` leaving at least 16 elements each),
    the partials interleaved (element i of thread j is `j + i * R`: consecutive
    threads read consecutive elements, coalesced), their dimension innermost
    among the partial op's outputs, then a final reduction over R. The
    combiner must be one splitReduction knows (add, mul, max, min, and, or,
    ...); other reductions are left alone.

    First, every reduction gets its parallel loops in front (each output's
    sum keeps its order), and so does each partial op:
    lazymlir-lower-to-loops{all-parallel} makes leading parallel loops
    threads, and a reduction loop in front of them (a conv bias gradient in
    NCHW: batch, channels, pixels) left the whole nest to one thread (28 ms
    of an MNIST step on an H100).
  }];
  let dependentDialects = ["mlir::linalg::LinalgDialect",
                           "mlir::tensor::TensorDialect"];
  let options = [
    Option<"ratio", "ratio", "int64_t", /*default=*/"1024",
           "Most partial reductions (threads) per output">,
    Option<"minLength", "min-length", "int64_t", /*default=*/"4096",
           "Shortest reduction split">,
    Option<"maxOutputs", "max-outputs", "int64_t", /*default=*/"1024",
           "Most output elements of a reduction split">,
  ];
}

def GpuTileParallelLoopsPass
    : Pass<"lazymlir-gpu-tile-parallel-loops", "mlir::func::FuncOp"> {
  let summary = "Tile each outermost scf.parallel into GPU blocks of threads";
  let description = [{
    After linalg ops become scf.parallel loops (one iteration per output
    element, reductions as sequential inner loops), each outermost
    scf.parallel with constant bounds and unit steps is tiled (upstream
    scf::tileParallelLoop, full tiles with a bounds guard): the innermost
    loop by up to `block-size` iterations, each loop further out by up to
    what the block has left (`block-size` divided by the tiles inside it).
    gpu-map-parallel-loops (innermost-first) then maps the tile
    loops to blocks and the inner loops to threads, so that consecutive
    threads of a warp (thread x) walk the innermost, contiguous dimension:
    coalesced loads and stores. A `block-size` below 1 is an error.
  }];
  let dependentDialects = ["mlir::scf::SCFDialect", "mlir::arith::ArithDialect"];
  let options = [
    Option<"blockSize", "block-size", "int64_t", /*default=*/"256",
           "Threads per block">,
  ];
}

def GpuWrapHostWorkPass
    : Pass<"lazymlir-gpu-wrap-host-work", "mlir::func::FuncOp"> {
  let summary = "Move work left outside parallel loops into one-thread "
                "parallel loops, so that it runs on the GPU";
  let description = [{
    After linalg ops become scf.parallel loops, what touches memory outside
    them (a full reduction's scf.for nest, scalar loads and stores, a
    division of two scalars) would run on the host, reading GPU memory. This
    pass moves each run of consecutive such ops (with the pure ops that
    compute on their results) into a one-iteration scf.parallel, which
    becomes a kernel of one thread: correct, not fast (block reductions are
    to come). What may stay on the host is what a launch plan
    (lazymlir-gpu-launch-plan) can do: allocations and deallocations, views
    (subview, reshapes), reads of globals, copies between contiguous buffers
    (identity layouts), constants, pure arithmetic on values the host has,
    and the parallel loops themselves; a deallocation, a contiguous copy and
    a parallel loop end a run, so program order is kept. A run whose
    results are used outside it (a data-dependent view) is left on the host
    with a warning.
  }];
  let dependentDialects = ["mlir::scf::SCFDialect", "mlir::arith::ArithDialect"];
}

def GpuLaunchPlanPass : Pass<"lazymlir-gpu-launch-plan", "mlir::ModuleOp"> {
  let summary = "Describe the GPU pipeline's host function as a launch plan "
                "(JSON) a runtime without MLIR executes";
  let description = [{
    The last pass of the GPU pipeline. After gpu-module-to-binary, the entry
    function must only allocate, view, copy and launch
    (lazymlir-gpu-wrap-host-work); this pass writes what it does, with every
    kernel module's PTX, as the module attribute `lazymlir.launch_plan` (a
    JSON string with `format` "lazymlir-gpu-plan", `version` 1 and `entry`,
    the function's name), which a runtime without MLIR executes
    (`lazymlir.gpu.launch`):

    - `arguments`: the entry's buffers in order (inputs, then the outputs
      bufferization turned into out-parameters), each a layout `{shape,
      strides, offset, dtype}` (torch dtype names); they are buffers 0..n-1;
    - `steps`, in program order: `alloc` (a new buffer of a layout),
      `view` (a new buffer viewing `source` with a static layout), `copy`
      (`source` into `target`), `constant` (a new buffer holding a constant
      global's bytes, base64), `dealloc`, and `launch` (`module`, `kernel`,
      `grid` and `block` sizes, `args`: each `{buffer: id}` or a scalar
      `{i64|i32|f32: value}`, the bare-pointer calling convention: a buffer
      is passed as its aligned data pointer);
    - `modules`: per kernel module, its `ptx`, `chip`, and `check_flag`
      (whether it defines the runtime-check flag global
      `__lazymlir_check_failed`, which the runtime reads after a run).

    Anything else in the entry (work left on the host, dynamic shapes or
    strides, an element type with no torch dtype, dynamic shared memory, a
    non-constant launch size, a kernel argument that is neither a buffer nor
    a constant, a global that is not a constant, a kernel module that is not
    NVVM PTX) is a diagnostic and the pass fails.
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "The host function the plan describes">,
  ];
}

def VerifyNvvmTargetsPass
    : Pass<"lazymlir-verify-nvvm-targets", "mlir::ModuleOp"> {
  let summary = "Reject NVVM targets that would abort the compiler";
  let description = [{
    Runs right before gpu-module-to-binary. LLVM's NVPTX backend aborts the
    process (`LLVM ERROR: PTX version 6.0 does not support target 'sm_90'`)
    on a chip it does not know or a PTX version below the chip's, and a
    kernel that calls libdevice (`__nv_expf`: every math op) without it
    linked gives PTX that ptxas rejects. For each `#nvvm.target` of each
    gpu.module this pass checks the chip (sm_75, sm_80, sm_86, sm_87,
    sm_89, sm_90, sm_90a, sm_100, sm_100a, sm_120 or sm_120a: the ones CUDA
    13's ptxas assembles), that its features name a PTX version (`+ptxNN`)
    of at least the chip's minimum, that every linked file exists, and that
    a module declaring `__nv_*` functions links a libdevice; each failure is
    a diagnostic on the module, and the pass fails.
  }];
}

def ChannelsLastPass : Pass<"lazymlir-channels-last", "mlir::func::FuncOp"> {
  let summary = "Rewrite NCHW convolutions and pooling to NHWC";
  let description = [{
    torch-mlir emits convolutions and pooling in PyTorch's logical NCHW
    layout, where the innermost loops run over the small window and the
    channels are strided. In NHWC the channels are contiguous: the CPU
    codegen vectorizes over them (a conv becomes im2col + a contraction
    whose vector dimension is the output channels, with the filter laid out
    HWCF as the contraction's row-major B operand).

    Each linalg.conv_2d_nchw_fchw, depthwise_conv_2d_nchw_chw,
    pooling_nchw_max and pooling_nchw_sum becomes its NHWC form between
    linalg.transpose ops on its operands and result. A tensor.pad between a
    transpose and its source is moved behind the transpose (with its padding
    permuted), so padding does not stop propagation. The transposes are then
    left to lazymlir-fuse-elementwise, which runs next: fusing a transpose
    with the elementwise ops around it composes their indexing maps, so a
    chain conv -> bias/bn/relu/residual -> conv keeps NHWC throughout and
    inverse transposes cancel, leaving layout changes only where the graph
    meets its NCHW inputs and outputs.
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect", "mlir::tensor::TensorDialect",
  ];
}

def EarlyDeallocsPass
    : Pass<"lazymlir-early-deallocs", "mlir::func::FuncOp"> {
  let summary = "Move each memref.dealloc of a block's own allocation to "
                "right after the last op that uses the buffer";
  let description = [{
    Upstream's ownership-based buffer deallocation frees a block's
    allocations at the end of the block: in a compiled training step every
    activation, gradient and temporary of the forward and the backward is
    alive until the step returns (BERT-base: the step's peak was the sum of
    all its temporaries). This pass moves a `memref.dealloc` whose operand
    is a `memref.alloc` of the same block to right after the last op of the
    block that uses the buffer, or anything computed from it (views, casts,
    its address as an index passed to a runtime call, transitively: a value
    derived from the buffer in any way counts as a use), so the runtime's
    pool hands the memory to the allocations that follow. Nothing moves
    past an op that derives a value used later, and a dealloc already right
    after its last use stays. Run after the buffer deallocation pipeline.
  }];
  let dependentDialects = ["mlir::memref::MemRefDialect"];
}

def PrivateFillsPass
    : Pass<"lazymlir-private-fills", "mlir::func::FuncOp"> {
  let summary = "Give each destination a shared linalg.fill writes its own "
                "clone of the fill";
  let description = [{
    linalg.fill is pure, so CSE merges every zero fill of one shape into one
    value (the zero accumulators of each layer's weight gradient, of every
    product's output). One-shot bufferization then fills one buffer and
    copies it into every other destination that is written in place: a
    memref.copy per use in the entry function, on one thread (a BERT h512
    training step copied ~360 MB of zeros that way). Every use of a fill of
    a tensor.empty with more than one use, as a destination (the init of a
    destination-style op, the initial value of an scf.for or scf.forall),
    gets its own clone of the fill and of its tensor.empty, right before the
    user, so that the fill is bufferized into that destination; when the
    fill has no other reader, the first destination keeps the original.
    Run after the last CSE, right before bufferization.
  }];
  let dependentDialects = ["mlir::linalg::LinalgDialect",
                           "mlir::tensor::TensorDialect"];
}

def ReshapedResultsPass
    : Pass<"lazymlir-reshaped-results", "mlir::func::FuncOp"> {
  let summary = "Compute a result returned through a reshape into its "
                "out-parameter's buffer";
  let description = [{
    A result returned through a reshape (AdamW's fused update computes a
    512x2048 parameter as 1048576 values and returns their expand_shape;
    attention's output is computed as 512x8x64 and returned collapsed)
    bufferizes to a view of a temporary, which
    buffer-results-to-out-params cannot replace by the out-parameter: it
    copies the view into it after the run, on one thread (108 copies in a
    BERT h512 training step). When the reshaped value (static shape) is
    computed in the returning block by an op that writes into a
    tensor.empty (the tied init of a destination-style op, the initial
    value of an scf.for or scf.forall; or down a chain of such writers used
    once each, as a product accumulating into a zero fill of an empty
    tensor; or any tensor a linalg op writes over without reading it), that
    op writes instead into the
    inverse reshape of a tensor.empty of the returned shape: after
    bufferization the reshapes fold, the returned value is that allocation,
    and it becomes the out-parameter. Run right before bufferization.
  }];
  let dependentDialects = ["mlir::tensor::TensorDialect"];
}

def PrivatizeTileScratchPass
    : Pass<"lazymlir-privatize-tile-scratch", "mlir::func::FuncOp"> {
  let summary = "Give each iteration of a parallel tile loop its own empty "
                "tensors";
  let description = [{
    tensor.empty is pure, so CSE merges an empty tensor inside a tile loop
    marked for parallel execution (`lazymlir.parallel_tiles`; an
    extract_slice of a full-size empty folds to one of the tile's shape)
    with an identical one defined before the loop, and one-shot
    bufferization then gives all iterations the one buffer allocated
    outside: the threads that run them race on it (GPT-2: the position
    embeddings' broadcast buffer became every tile's layer-norm output).
    Every use inside such a loop of an empty tensor defined outside it gets
    its own clone next to the user, so the buffer is allocated per
    iteration. Run after the last CSE, right before bufferization.
  }];
  let dependentDialects = ["mlir::tensor::TensorDialect", "mlir::scf::SCFDialect"];
}

def ReadonlyArgumentsPass
    : Pass<"lazymlir-readonly-arguments", "mlir::ModuleOp"> {
  let summary = "Mark the entry function's tensor arguments not writable "
                "for one-shot bufferization";
  let description = [{
    The entry function's arguments are the caller's torch tensors (device
    data, which may be read again by later graphs). With function
    boundaries bufferized, one-shot bufferization otherwise takes them as
    writable and updates them in place: a `tensor.insert_slice` into an
    argument (torch-mlir's slice_scatter) or a scatter loop into one wrote
    into the input tensor. This pass sets `bufferization.writable = false`
    on every tensor argument of the entry function (`entry`), so that
    bufferization writes into a copy instead, only where an in-place update
    would happen.
  }];
  let dependentDialects = ["mlir::bufferization::BufferizationDialect"];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Name of the function the runtime calls">,
  ];
}

def DonateArgumentsPass
    : Pass<"lazymlir-donate-arguments", "mlir::ModuleOp"> {
  let summary = "Write results into the arguments donated to them";
  let description = [{
    An argument of the entry function (`entry`) with the attribute
    `lazymlir.donated_to = j` is a buffer the caller gives up: the graph's
    result `j` (a new value of the same storage: a parameter or an
    optimizer moment a step updates) is to be written into it instead of
    into a buffer of its own, so the old and the new value are never both
    alive (issue 49). The argument's type must be the result's.

    The argument becomes writable (`bufferization.writable = true`,
    overriding lazymlir-readonly-arguments) and the returned value goes
    through `bufferization.materialize_in_destination` into it, placed after
    the value is computed and after the last op that reads the argument,
    so no read of the old value follows the write. The `tensor.empty` the
    value was computed into is then replaced by the argument (empty tensor
    elimination, restricted to these ops), so the update is computed in
    place when one-shot bufferization finds it safe, and copied into the
    argument at the end otherwise: correct by bufferization's own analysis.
    The result gets `lazymlir.donated_from = i`, which
    lazymlir-drop-donated-results reads after bufferization.
  }];
  let dependentDialects = ["mlir::bufferization::BufferizationDialect"];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Name of the function the runtime calls">,
  ];
}

def DropDonatedResultsPass
    : Pass<"lazymlir-drop-donated-results", "mlir::ModuleOp"> {
  let summary = "Remove the results written into donated arguments from "
                "the entry function's signature";
  let description = [{
    Runs after one-shot bufferization (before buffer-results-to-out-params):
    a result marked `lazymlir.donated_from = i` by lazymlir-donate-arguments
    must now return the memref of argument `i` itself; it is dropped from
    the return and the signature (the caller finds the new value in the
    buffer it passed). A result that does not is an error, never a silent
    copy into a buffer the caller does not read.
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Name of the function the runtime calls">,
  ];
}

def GuardDonatedWritesPass
    : Pass<"lazymlir-guard-donated-writes", "mlir::ModuleOp"> {
  let summary = "Skip the writes into donated arguments when a runtime "
                "check failed";
  let description = [{
    When a runtime check fails (`@__lazymlir_check_failed`,
    lazymlir-guard-runtime-checks) the runtime reruns the graph eagerly from
    its inputs to raise eager's error: the inputs must still hold their
    values. With donated arguments (lazymlir-donate-arguments; marked
    `lazymlir.donated` by lazymlir-drop-donated-results) they would not, so
    in the entry function (`entry`, after bufferization, results as
    out-parameters) everything from the first op that may write into a
    donated argument (or a view of it) on runs under `scf.if` the flag is
    still 0. Every check must come before that op: one after it is an
    error (the caller then compiles the graph without donation). Runs
    before the deallocation pipeline, which frees what the skipped part
    would have on either path. A module without the flag only loses the
    marks.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::memref::MemRefDialect",
    "mlir::scf::SCFDialect",
  ];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Name of the function the runtime calls">,
  ];
}

def DistinctResultsPass
    : Pass<"lazymlir-distinct-results", "mlir::func::FuncOp"> {
  let summary = "Return each value at most once, through a copy otherwise";
  let description = [{
    With destination passing every result gets its own caller-allocated
    buffer, but upstream buffer-results-to-out-params (with hoisted
    allocations) crashes when one buffer is returned twice. A tensor
    returned more than once is therefore returned through a linalg.copy
    into a new tensor for each repetition: each out-parameter is written,
    nothing is aliased.
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect", "mlir::tensor::TensorDialect",
  ];
}

def CountKernelsPass
    : Pass<"lazymlir-count-kernels", "mlir::ModuleOp"> {
  let summary = "Record the number of kernels (loop nests) of the entry "
                "function as the module attribute lazymlir.kernel_count";
  let description = [{
    Run after fusion and tiling, at the end of the tensor stage: every
    linalg op left at the top of the entry function (`entry`), and every
    tile loop nest there (scf.for or scf.forall, with what is fused into
    it), becomes one loop nest, i.e. one pass over its data. Their number
    is what fusion is judged by; it is kept on the module (i64) so that it
    survives the lowering and shows in the LLVM-dialect dump, and the
    runtime reports it (`kernel_count`).
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Function whose kernels are counted">,
  ];
}

def StridedCopiesToLinalgPass
    : Pass<"lazymlir-strided-copies-to-linalg", "mlir::func::FuncOp"> {
  let summary = "Rewrite memref.copy between non-contiguous layouts as "
                "linalg.copy";
  let description = [{
    A memref.copy between layouts that are not both the identity (a pad's
    interior, a tile written back) would be lowered to a call of MLIR's
    runtime memrefCopy, which copies element by element on one thread (a
    third of a conv input gradient's time in the MNIST network). This pass
    rewrites each such copy, of static or dynamic shape, as a linalg.copy,
    which lazymlir-lower-to-loops (run after it) lowers like any other
    linalg op: vectorizable loops, parallel when large. Copies between two
    identity layouts stay memref.copy (a memcpy).
  }];
  let dependentDialects = ["mlir::linalg::LinalgDialect"];
}

def PrefetchRowTilesPass
    : Pass<"lazymlir-prefetch-row-tiles", "mlir::func::FuncOp"> {
  let summary = "Fetch the next row tile into the cache while this one computes";
  let description = [{
    lazymlir-fuse-row-reductions runs softmax and layer norm tile by tile of
    rows: the tile's first pass streams its rows in from memory, the later
    passes compute from the cache. On their own, the two alternate: the
    memory waits while a tile computes, the cores wait while the next tile
    streams in, so with its input out of cache softmax 4096x1024 took its
    compute time plus its memory time (1.31-1.38x eager's, which overlaps
    them). This pass gives the tile's last pass that reads a tile slice by
    vectors (the normalizing pass, vectorized by lazymlir-streaming-stores)
    one `memref.prefetch` per vector load: the same element one tile
    further down, so the next tile arrives while this one computes, one
    cache line per vector, spread over the pass (softmax out of cache:
    1.11-1.13x eager, layer norm 1.27x -> 1.06-1.08x, measured in one
    process). The last tile fetches its own last rows again instead of
    reading past the buffer (a prefetch never faults, but its address must
    stay inside the allocation).

    Tile loops are recognized by their `lazymlir.row_tiles` mark (set by
    lazymlir-fuse-row-reductions; removed here); slices are subviews of a
    buffer defined outside the tile loop, at the loop's induction variable
    in their first dimension, one step of rows, unit strides. Only vector
    loads of at least 32 bytes get a prefetch (lazymlir-streaming-stores
    vectorizes the normalizing pass of large outputs; a scalar loop would
    get one per element). Runs after lazymlir-lower-to-loops and before
    lazymlir-parallelize-tiles (whose threads take consecutive tiles in
    guided chunks, so the next tile is usually the same thread's).
  }];
  let options = [
    Option<"locality", "locality", "int64_t", /*default=*/"3",
           "Locality hint of the prefetches (0-3: llvm.prefetch's; 3 keeps "
           "the line in every cache level); -1: no prefetches">,
  ];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::memref::MemRefDialect",
  ];
}

def StreamingStoresPass
    : Pass<"lazymlir-streaming-stores", "mlir::func::FuncOp"> {
  let summary = "Vectorize elementwise kernels with large outputs with "
                "aligned non-temporal (streaming) stores";
  let description = [{
    Elementwise kernels (bufferized linalg.generic) whose output has at
    least `min-bytes` bytes (the CPU pipeline's `streaming-store-bytes`,
    16 MiB by default) are vectorized here, 64 bytes per store, with
    non-temporal (streaming) stores: such an output is evicted before
    anything reads it again, and a regular store first reads every line it
    writes (read for ownership), a third more memory traffic for a
    two-input kernel (a memory-bound 4M-element kernel ran 20-27% faster
    with streaming stores). Non-temporal vector stores must be aligned, so
    the vector nest runs only when the output's address is a multiple of 64
    (the runtime's buffers are), under an scf.if whose else branch holds the
    linalg op itself, left for lazymlir-lower-to-loops (run after this
    pass). The vector nest's outer loops become one scf.parallel when the
    op has at least `parallel-threshold` iteration points, chosen like
    lazymlir-lower-to-loops chooses them for the scalar nest; when that
    covers the vector loop itself, it runs in blocks of 64 stores (each a
    countable loop: the OpenMP loop reloads its bound after every
    iteration). An op that also reads the buffer it writes (an in-place
    update of a donated parameter or optimizer moment) gets the same vector
    nest with plain stores: its lines are in cache from the read, and a
    non-temporal store would send each to memory a second time (a 50M-float
    in-place update 18.1 -> 13.4 ms; eager's add_ 13.0).

    The same holds for an elementwise op in a tile loop writing a tile (a
    subview) of such an output, like softmax's normalizing pass: its tiles
    stream when the tile starts 64-byte aligned and its rows lie a multiple
    of 64 bytes apart (4096x1024 softmax: 5-10% faster on 2 threads). A
    tile loop is recognized by its `lazymlir.parallel_tiles` mark (set by
    lazymlir-tile-contractions, lazymlir-fuse-row-reductions and
    lazymlir-vectorize-transposes), so this pass must run before
    lazymlir-parallelize-tiles, which removes it.

    Eligible: one output, written through the identity map, unit stride
    along the innermost loop, rows a multiple of 64 bytes apart, with an
    innermost size that 64 bytes' worth of elements divides; every input
    read either contiguously (unit stride) along the innermost loop or not
    depending on it (a scalar, broadcast); a body of elementwise ops only
    (no linalg.index, no read of the output; the scalar llvm.intr.ldexp of
    lazymlir-approximate-math becomes a call of the overloaded intrinsic on
    vectors); no i1 memory (vectors of i1 are bit-packed, memory holds
    bytes).

    Outputs with a dynamic (`?`) size are not streamed (their size is known
    at run time only); a remark says so.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::memref::MemRefDialect",
    "mlir::scf::SCFDialect", "mlir::vector::VectorDialect",
  ];
  let options = [
    Option<"minBytes", "min-bytes", "int64_t", /*default=*/"16777216",
           "Smallest output (bytes; of the whole buffer for a tile) of an "
           "elementwise kernel written with non-temporal vector stores; "
           "0: never">,
    Option<"parallelThreshold", "parallel-threshold", "int64_t",
           /*default=*/"0",
           "Smallest iteration space (points) whose vector nest runs its "
           "outer loops in parallel; 0: none">,
  ];
}

def LowerToLoopsPass : Pass<"lazymlir-lower-to-loops", "mlir::func::FuncOp"> {
  let summary = "Lower bufferized linalg ops to loops, parallel ones for "
                "large kernels";
  let description = [{
    A linalg op on memrefs whose iteration space has at least
    `parallel-threshold` points becomes a loop nest whose outer loops are
    one scf.parallel (reductions stay scf.for inside), which the CPU
    pipeline then turns into an OpenMP parallel loop (when its `threads` is
    above 1; the pipeline passes a threshold of 0 otherwise); smaller ones
    become plain scf.for nests. Waking threads for a small kernel costs more
    than it saves, and every parallel loop is outlined into its own function
    that LLVM must compile. Only outer loops run in parallel: among the
    leading loops whose iterations write disjoint output elements (a
    parallel dimension indexing every output), the fewest whose iterations
    number 64 (a static schedule then balances; all of them if they number
    fewer), and never the innermost of several loops, which LLVM
    vectorizes. A threshold of 0 makes no loop parallel.

    With `all-parallel` (the GPU pipeline), every leading loop whose
    iterations write disjoint outputs becomes parallel, whatever its size
    and the threshold: a thread per output element.

    A reduction's innermost run of reduction loops carries each output
    element as a loop value: loaded once before the loops, stored once after
    (linalg's own lowering loads and stores it in the innermost loop, and
    LLVM cannot keep it in a register: it cannot tell the output from the
    inputs); LLVM then vectorizes the loop, the combiner being reassociable
    (lazymlir-reassociate-reductions). Only where it is safe: no output is a
    view of an input's buffer, and nothing else in those loops writes memory
    or reads the outputs.

    With `vector-width` (the CPU pipeline: the host's 32-bit lanes) and
    unless `all-parallel`, the innermost loop of an op without reductions
    whose operands each read that loop contiguously (unit stride, last
    dimension) or not at all carries a `loop_annotation` asking LLVM to
    vectorize it at that width (scf-to-cf moves it to the loop's latch
    branch, cf-to-llvm keeps it): LLVM's cost model kept such loops scalar
    when their body is a long polynomial with selects and divisions (erf's
    and tanh's approximations: BERT's GELU epilogue at 1.4 ns an element),
    and LLVM 22 ignores a request to vectorize that names no width.

    Tile loops (scf.for marked `lazymlir.parallel_tiles`) are left as they
    are, mark included, for lazymlir-parallelize-tiles (the linalg ops
    inside them are lowered like any other). In the CPU pipeline this pass
    runs after lazymlir-strided-copies-to-linalg and
    lazymlir-streaming-stores (which leave linalg ops for it to lower) and
    before lazymlir-parallelize-tiles.

    A top-level op with dynamic (`?`) ranges whose static ranges alone do
    not reach the threshold is lowered twice, parallel and sequential, under
    an scf.if on its iteration points reaching `parallel-threshold`: chosen
    at run time (a `?` loop counts as 64 iterations when choosing the
    parallel loops).
  }];
  let dependentDialects = ["mlir::scf::SCFDialect", "mlir::arith::ArithDialect",
                           "mlir::linalg::LinalgDialect",
                           "mlir::LLVM::LLVMDialect"];
  let options = [
    Option<"vectorWidth", "vector-width", "unsigned", /*default=*/"0",
           "Vector width (lanes) asked of LLVM for contiguous elementwise "
           "loops; 0: none asked">,
    Option<"parallelThreshold", "parallel-threshold", "int64_t",
           /*default=*/"0",
           "Smallest iteration space (points) lowered to parallel loops; "
           "0: none">,
    Option<"allParallel", "all-parallel", "bool", /*default=*/"false",
           "Every leading loop whose iterations write disjoint outputs "
           "becomes parallel, whatever its size (the GPU pipeline: a thread "
           "per output element, reductions still carrying their "
           "accumulators in registers)">,
  ];
}

def ParallelizeTilesPass
    : Pass<"lazymlir-parallelize-tiles", "mlir::func::FuncOp"> {
  let summary = "Run the outer loops of large tile nests as one parallel "
                "loop; drop the lazymlir.parallel_tiles marks";
  let description = [{
    lazymlir-tile-contractions, lazymlir-fuse-row-reductions and
    lazymlir-vectorize-transposes mark the scf.for loops of tiles over
    parallel dimensions `lazymlir.parallel_tiles` with the tiled op's
    iteration points (i64; ParallelTiling.h): different iterations write
    disjoint tiles. After bufferization, this pass turns the outer loops of
    each marked nest whose tiled op has at least `parallel-threshold` points
    into one scf.parallel (the fewest whose iterations number 64, like
    lazymlir-lower-to-loops; a loop without static bounds counts as
    enough), which the CPU pipeline then turns into an OpenMP parallel loop.

    A nest qualifies from its outermost marked loop down through marked
    loops without loop-carried values, each the only effectful op of its
    parent's body. Per-tile temporaries that buffer-loop-hoisting moved out
    of the tile loops (and promote-buffers-to-stack made allocas) would be
    shared by the threads: each one allocated outside the nest for its use
    only, of static or dynamic (`?`) size (its sizes are defined before the
    nest), is allocated by each iteration of the parallel loop instead (on
    the heap: allocas would keep the OpenMP lowering's per-iteration alloca
    scope, which must stay one block; lazymlir-per-thread-scratch then
    allocates it once per thread). Nests that allocate inside stay
    sequential. The mark is removed from every loop either way (a threshold
    of 0 makes no loop parallel), so passes that read it
    (lazymlir-privatize-tile-scratch, lazymlir-streaming-stores) must run
    before this one. In the CPU pipeline it runs after
    lazymlir-lower-to-loops.
  }];
  let dependentDialects = ["mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect"];
  let options = [
    Option<"parallelThreshold", "parallel-threshold", "int64_t",
           /*default=*/"0",
           "Smallest tiled op (iteration points) whose tile loops run in "
           "parallel; 0: none">,
  ];
}

def PerThreadScratchPass
    : Pass<"lazymlir-per-thread-scratch", "mlir::func::FuncOp"> {
  let summary = "Allocate a parallel loop's per-iteration scratch once per "
                "thread";
  let description = [{
    lazymlir-parallelize-tiles gives each iteration of a parallel tile loop
    its own scratch (a row tile's maxima and sums in softmax and layer
    norm): a memref.alloc at the start of the iteration and a dealloc at its
    end, served by the runtime's buffer pool, whose mutex the threads then
    take four times a tile (softmax 4096x1024: 1024 times a run, the two
    threads contending; its kernel ran 3-4% faster without). After convert-scf-to-openmp this
    pass moves such scratch out of the omp.wsloop into the enclosing
    omp.parallel region, which each thread runs once: the iterations a
    thread takes reuse its buffer one after the other, which is all that
    per-iteration scratch promises (an allocation's contents are undefined).
    Static scratch of at most `max-stack-bytes` becomes a memref.alloca (the
    region is an automatic allocation scope: freed when the thread leaves
    it); larger or dynamic scratch is allocated before the loop and freed
    after it. Moved: allocations directly in the loop nest's body (or in
    the alloca scope wrapping it), whose sizes are computed outside the
    parallel region, with one dealloc in the same block and no use outside
    it.
  }];
  let options = [
    Option<"maxStackBytes", "max-stack-bytes", "int64_t",
           /*default=*/"16384",
           "Largest static scratch put on the thread's stack">,
  ];
  let dependentDialects = ["mlir::memref::MemRefDialect"];
}

def ScheduleWorksharingPass
    : Pass<"lazymlir-schedule-worksharing", "mlir::func::FuncOp"> {
  let summary = "Choose the schedule of OpenMP worksharing loops";
  let description = [{
    convert-scf-to-openmp gives every loop the default (static) schedule:
    each thread gets one equal block of iterations, and the loop ends when
    the slowest block does. On a machine whose cores are also busy with
    other work (the Python thread tracing the next step while a graph runs,
    other processes, eager PyTorch's threads) a statically scheduled loop
    runs at the speed of its most loaded core. This pass sets `schedule` on
    every omp.wsloop that has none. With `guided` (the default), threads
    take chunks of the remaining iterations divided by the team size, so a
    thread whose core is busy takes fewer and the last chunks are small; the
    chunks cost one atomic operation each in the runtime, a logarithmic
    number. `static` keeps the default schedule; any other value is an
    error.
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", /*default=*/"\"guided\"",
           "static or guided">,
  ];
}

def OutlineKernelsPass : Pass<"lazymlir-outline-kernels", "mlir::ModuleOp"> {
  let summary = "Outline each loop nest of the entry into a kernel function "
                "named by its content";
  let description = [{
    After bufferization, lower-to-loops and parallelize-tiles, the entry
    function (`entry`) is a sequence of loop nests (kernels) between
    allocations. Each top-level op of the entry that holds a loop (scf.for,
    scf.parallel, scf.while, scf.forall) becomes a private function, called
    in its place: the values it reads from above become arguments (memrefs,
    scalars; constants are cloned in, and memref.get_global ops are moved to
    the entry and passed, so a kernel references no global). Each kernel is
    named `__lazymlir_k_<hash>`, the first 32 hex digits of the SHA-256 of
    its printed IR (under a placeholder name, without locations), and
    carries the unit attribute `lazymlir.kernel`: identical loop nests (a
    transformer's layers, an optimizer's updates of same-shaped parameters)
    become one function, and the runtime compiles each distinct kernel once,
    in parallel with the others, and caches it across graphs and processes
    under that name. LLVM's optimizer, whose cost grows faster than the size
    of a function, sees one kernel at a time. The call carries the fused
    locations of the whole nest (the profiler's origins, see
    lazymlir-instrument-kernels).
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Function whose loop nests are outlined">,
  ];
}

def OutputsAtFirstWritePass
    : Pass<"lazymlir-outputs-at-first-write", "mlir::ModuleOp"> {
  let summary = "Tell the runtime, before the first op that touches each "
                "out-parameter of the entry, that it is about to be written";
  let description = [{
    Destination passing (DESIGN.md, decision 4) allocates every output
    before the graph runs. A training step's gradients are outputs: paged
    in from the start, they were held through the whole forward, where
    eager makes each one during the backward as the activations it replaces
    die (BERT-base: 0.41 GiB). The runtime now hands out an output's buffer
    without pages and gives it pages, moved in from its pool's idle blocks,
    when the entry calls `lazymlir_output_ready(pointer)` (i64; declared
    here, defined by the runtime; a no-op for a buffer that is not such an
    output or already has its pages).

    For each argument of the entry (`entry`) that carries the unit
    attribute `bufferize.result` (buffer-results-to-out-params'
    `add-result-attr`; the pass removes it), the call goes right before the
    first top-level op of the entry that uses the argument or a view of it
    (views themselves touch no memory and are looked through), with the
    argument's aligned pointer. An out-parameter nothing uses gets no call.
    Run after lazymlir-outline-kernels, when the entry is its sequence of
    kernel calls, allocations and deallocations.
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Function whose out-parameters are announced">,
  ];
  let dependentDialects = ["mlir::arith::ArithDialect",
                           "mlir::func::FuncDialect",
                           "mlir::memref::MemRefDialect"];
}

def InstrumentKernelsPass
    : Pass<"lazymlir-instrument-kernels", "mlir::ModuleOp"> {
  let summary = "Time each kernel call of the entry (the profiler's compile "
                "mode)";
  let description = [{
    The profiler's compile mode (the CPU pipeline's option `profile`), run
    after lazymlir-outline-kernels. Each call of the entry (`entry`) to a
    function with the `lazymlir.kernel` attribute becomes call site number
    i: it is bracketed by calls to `__lazymlir_profile_begin(i)` and
    `__lazymlir_profile_end(i)` (i64; declared here, defined by the runtime,
    which reads a clock in each), and the module gets the attribute
    `lazymlir.profile_sites`, an array whose i-th dictionary describes site
    i: `kernel` (the callee), `ops` (the ops named by the call's location:
    each FileLineColLoc whose file name is `op:<name>`; the Python frontend
    gives every op it emits the location of the aten op it came from in
    that form, and lazymlir-outline-kernels gives the call the fused
    locations of the nest), `shapes` (the operand types), `bytes` (the sizes
    of the static memref operands) and `flops` (an estimate: each
    floating-point arith/math op of the callee, times the trip counts of the
    loops around it that have constant bounds, times its vector lanes; two
    for an FMA or outer product; a vector.contract counts two per point of
    its iteration space). Kernels themselves are not changed, so they stay
    the same compiled code as without the profiler.
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Function whose kernel calls are timed">,
  ];
}

#endif // LAZYMLIR_TRANSFORMS_PASSES

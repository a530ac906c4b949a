//===- GpuLaunchPlan.cpp - a GPU graph as data a runtime can execute ------===//
//
// The GPU runtime (item 3 of docs/NOTES.md's GPU section) needs no MLIR: it
// reads this plan (JSON) and the kernels' PTX, allocates buffers with
// torch, and launches through the CUDA driver. See Passes.td for the
// format.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/Support/Base64.h"
#include "llvm/Support/JSON.h"

namespace lazymlir {
#define GEN_PASS_DEF_GPULAUNCHPLANPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;
namespace json = llvm::json;

namespace {

/// The plan's name of an element type (torch's), or empty when the runtime
/// has no such dtype.
std::string dtypeName(Type type) {
  if (type.isF32())
    return "float32";
  if (type.isF64())
    return "float64";
  if (type.isF16())
    return "float16";
  if (type.isBF16())
    return "bfloat16";
  if (type.isInteger(1))
    return "bool";
  if (type.isInteger(8))
    return "int8";
  if (type.isInteger(16))
    return "int16";
  if (type.isInteger(32))
    return "int32";
  if (type.isInteger(64))
    return "int64";
  return "";
}

json::Array asJson(ArrayRef<int64_t> values) {
  json::Array array;
  for (int64_t v : values)
    array.push_back(v);
  return array;
}

struct GpuLaunchPlanPass
    : lazymlir::impl::GpuLaunchPlanPassBase<GpuLaunchPlanPass> {
  using Base::Base;

  DenseMap<Value, int64_t> buffers;
  json::Array steps;
  bool broken = false;

  InFlightDiagnostic fail(Operation *op) {
    broken = true;
    return op->emitError("lazymlir: the GPU launch plan cannot hold this: ");
  }

  /// `type`'s layout as (shape, strides, offset, dtype), or a diagnostic.
  std::optional<json::Object> layout(Operation *op, MemRefType type) {
    SmallVector<int64_t> strides;
    int64_t offset;
    std::string dtype = dtypeName(type.getElementType());
    if (!type.hasStaticShape() ||
        failed(type.getStridesAndOffset(strides, offset)) ||
        ShapedType::isDynamic(offset) ||
        llvm::any_of(strides, ShapedType::isDynamic)) {
      fail(op) << "a buffer of dynamic shape or layout " << type;
      return std::nullopt;
    }
    if (dtype.empty()) {
      fail(op) << "element type " << type.getElementType();
      return std::nullopt;
    }
    return json::Object{{"shape", asJson(type.getShape())},
                        {"strides", asJson(strides)},
                        {"offset", offset},
                        {"dtype", dtype}};
  }

  std::optional<int64_t> bufferOf(Operation *op, Value value) {
    auto it = buffers.find(value);
    if (it != buffers.end())
      return it->second;
    fail(op) << "an operand that is no buffer of the plan";
    return std::nullopt;
  }

  int64_t newBuffer(Value value) {
    int64_t id = buffers.size();
    buffers[value] = id;
    return id;
  }

  void step(Operation *op) {
    if (isa<arith::ConstantOp, func::ReturnOp>(op))
      return; // constants are read where they are used
    if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
      std::optional<json::Object> shape = layout(op, alloc.getType());
      if (!shape)
        return;
      json::Object s{{"op", "alloc"}, {"buffer", newBuffer(alloc)}};
      s.insert({"layout", json::Value(std::move(*shape))});
      steps.push_back(std::move(s));
      return;
    }
    if (auto dealloc = dyn_cast<memref::DeallocOp>(op)) {
      if (std::optional<int64_t> id = bufferOf(op, dealloc.getMemref()))
        steps.push_back(json::Object{{"op", "dealloc"}, {"buffer", *id}});
      return;
    }
    if (auto view = dyn_cast<ViewLikeOpInterface>(op)) {
      auto type = dyn_cast<MemRefType>(view->getResult(0).getType());
      std::optional<int64_t> source = bufferOf(op, view.getViewSource());
      if (!type || !source)
        return;
      std::optional<json::Object> shape = layout(op, type);
      if (!shape)
        return;
      json::Object s{{"op", "view"},
                     {"buffer", newBuffer(view->getResult(0))},
                     {"source", *source}};
      s.insert({"layout", json::Value(std::move(*shape))});
      steps.push_back(std::move(s));
      return;
    }
    if (auto copy = dyn_cast<memref::CopyOp>(op)) {
      std::optional<int64_t> source = bufferOf(op, copy.getSource());
      std::optional<int64_t> target = bufferOf(op, copy.getTarget());
      if (source && target)
        steps.push_back(json::Object{
            {"op", "copy"}, {"source", *source}, {"target", *target}});
      return;
    }
    if (auto global = dyn_cast<memref::GetGlobalOp>(op)) {
      auto symbol = SymbolTable::lookupNearestSymbolFrom<memref::GlobalOp>(
          op, global.getNameAttr());
      auto data = symbol ? dyn_cast_or_null<DenseElementsAttr>(
                               symbol.getInitialValueAttr())
                         : nullptr;
      std::optional<json::Object> shape = layout(op, global.getType());
      if (!shape)
        return;
      if (!data || !symbol.getConstant()) {
        fail(op) << "a global that is not a constant with a value";
        return;
      }
      // One element after another, as the buffer holds them. Booleans are
      // a byte each in a buffer, but DenseElementsAttr keeps i1 bit-packed
      // (a splat true is one 0xff byte): read them as values, never as raw
      // data (a constant mask of true became a mask of false).
      std::vector<char> bytes;
      if (data.getElementType().isInteger(1)) {
        for (bool value : data.getValues<bool>())
          bytes.push_back(value ? 1 : 0);
      } else if (data.isSplat()) {
        ArrayRef<char> one = data.getRawData();
        for (int64_t i = 0; i < data.getNumElements(); ++i)
          bytes.insert(bytes.end(), one.begin(), one.end());
      } else {
        bytes.assign(data.getRawData().begin(), data.getRawData().end());
      }
      json::Object s{{"op", "constant"},
                     {"buffer", newBuffer(global)},
                     {"data", llvm::encodeBase64(bytes)}};
      s.insert({"layout", json::Value(std::move(*shape))});
      steps.push_back(std::move(s));
      return;
    }
    if (auto launch = dyn_cast<gpu::LaunchFuncOp>(op)) {
      json::Array sizes[2];
      Value dims[2][3] = {
          {launch.getGridSizeX(), launch.getGridSizeY(), launch.getGridSizeZ()},
          {launch.getBlockSizeX(), launch.getBlockSizeY(),
           launch.getBlockSizeZ()}};
      for (int k = 0; k < 2; ++k)
        for (Value dim : dims[k]) {
          std::optional<int64_t> value = getConstantIntValue(dim);
          if (!value) {
            fail(op) << "a grid or block size that is not a constant";
            return;
          }
          sizes[k].push_back(*value);
        }
      if (launch.getDynamicSharedMemorySize()) {
        fail(op) << "dynamic shared memory";
        return;
      }
      json::Array args;
      for (Value arg : launch.getKernelOperands()) {
        if (isa<MemRefType>(arg.getType())) {
          std::optional<int64_t> id = bufferOf(op, arg);
          if (!id)
            return;
          args.push_back(json::Object{{"buffer", *id}});
          continue;
        }
        Attribute constant;
        if (!matchPattern(arg, m_Constant(&constant))) {
          fail(op) << "a kernel argument that is not a buffer or a constant";
          return;
        }
        if (auto integer = dyn_cast<IntegerAttr>(constant)) {
          if (arg.getType().isIndex() || arg.getType().isInteger(64)) {
            args.push_back(json::Object{{"i64", integer.getInt()}});
            continue;
          }
          if (arg.getType().isInteger(32)) {
            args.push_back(json::Object{{"i32", integer.getInt()}});
            continue;
          }
        }
        if (auto real = dyn_cast<FloatAttr>(constant);
            real && real.getType().isF32()) {
          args.push_back(json::Object{{"f32", real.getValueAsDouble()}});
          continue;
        }
        fail(op) << "a kernel argument of type " << arg.getType();
        return;
      }
      json::Object s{{"op", "launch"},
                     {"module", launch.getKernelModuleName().getValue()},
                     {"kernel", launch.getKernelName().getValue()}};
      s.insert({"grid", std::move(sizes[0])});
      s.insert({"block", std::move(sizes[1])});
      s.insert({"args", std::move(args)});
      steps.push_back(std::move(s));
      return;
    }
    fail(op) << "an op that is not an allocation, a view, a copy or a "
                "kernel launch (work left on the host)";
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(entry);
    if (!func || func.isExternal()) {
      module.emitError("lazymlir: no entry function '") << entry << "'";
      return signalPassFailure();
    }
    json::Array arguments;
    for (BlockArgument arg : func.getArguments()) {
      auto type = dyn_cast<MemRefType>(arg.getType());
      std::optional<json::Object> shape =
          type ? layout(func, type) : std::nullopt;
      if (!type) {
        fail(func) << "an argument that is not a buffer";
      }
      if (!shape)
        return signalPassFailure();
      newBuffer(arg);
      arguments.push_back(std::move(*shape));
    }
    for (Block &block : func.getBody())
      for (Operation &op : block)
        step(&op);

    json::Object modules;
    for (auto binary : module.getOps<gpu::BinaryOp>()) {
      for (Attribute attr : binary.getObjects()) {
        auto object = dyn_cast<gpu::ObjectAttr>(attr);
        auto target = object
                          ? dyn_cast<NVVM::NVVMTargetAttr>(object.getTarget())
                          : nullptr;
        if (!target || object.getFormat() != gpu::CompilationTarget::Assembly) {
          fail(binary) << "a kernel module that is not NVVM PTX";
          continue;
        }
        StringRef ptx = object.getObject().getValue();
        modules[binary.getName()] = json::Object{
            {"ptx", ptx},
            {"chip", target.getChip()},
            {"check_flag", ptx.contains("__lazymlir_check_failed")}};
      }
    }
    if (broken)
      return signalPassFailure();
    json::Object plan{
        {"format", "lazymlir-gpu-plan"}, {"version", 1}, {"entry", entry}};
    plan.insert({"arguments", std::move(arguments)});
    plan.insert({"steps", std::move(steps)});
    plan.insert({"modules", std::move(modules)});
    std::string text;
    llvm::raw_string_ostream os(text);
    os << json::Value(std::move(plan));
    module->setAttr(lazymlir::kLaunchPlanAttr,
                    StringAttr::get(&getContext(), text));
  }
};

} // namespace

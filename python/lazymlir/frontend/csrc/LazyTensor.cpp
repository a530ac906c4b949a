// Lazy tensors as a C++ TensorImpl on the PrivateUse1 key, and the kernel
// every op on them reaches.
//
// A lazy tensor's metadata (sizes, strides, offset, dtype, the conjugate and
// negative bits) is real and lives in its LazyTensorImpl; its value is a
// trace, whose state is a Python object (lazymlir.frontend.tensor.State: the
// storage it shares with its aliases, its view chain, its current value node)
// held by the impl. Shallow copies (`.data`, `detach()` inside autograd,
// `nn.Parameter(t)`, autograd's saved outputs) and `t.data = other` copy that
// state with the metadata, so no path through autograd loses it.
//
// One boxed kernel is registered on PrivateUse1 for every operator that is
// not CompositeImplicitAutograd (a backend fallback alone would let
// CompositeExplicitAutograd kernels run first: `mul` would arrive as `empty`
// and `mul.out`), plus a fallback for operators registered later. It hands the
// op and its arguments to the Python tracer (tensor.dispatch), as
// __torch_dispatch__ would. Knows nothing of MLIR (docs/DESIGN.md, decision 2).

#include "LazyTensor.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace lazymlir::device {

// The Python half: set by install() before any lazy tensor exists.
PyObject* gCopyState = nullptr;  // tensor.State.copy (unbound)

std::atomic<bool> gDropped{false};

namespace {
std::mutex gDroppedMutex;
// Never destroyed: a thread may drop a state while the process exits.
auto* gDroppedStates = new std::vector<PyObject*>();
unsigned long gMainThread = 0;  // Python's main thread (install() sets it)
}  // namespace

void releaseState(PyObject* state) {
  if (PyGILState_Check()) {
    Py_DECREF(state);
  } else if (PyThread_get_thread_ident() == gMainThread) {
    // The thread that shuts the interpreter down is never ended by it.
    if (!Py_IsInitialized()) return;  // shut down: left to the process's exit
    py::gil_scoped_acquire gil;
    Py_DECREF(state);
  } else {
    std::lock_guard<std::mutex> lock(gDroppedMutex);
    gDroppedStates->push_back(state);
    gDropped.store(true, std::memory_order_release);
  }
}

void releaseDroppedStates() {
  std::vector<PyObject*> states;
  {
    std::lock_guard<std::mutex> lock(gDroppedMutex);
    states.swap(*gDroppedStates);
    gDropped.store(false, std::memory_order_release);
  }
  for (PyObject* state : states) Py_DECREF(state);
}

namespace {

PyObject* gDispatch = nullptr;  // tensor.dispatch(func, args, kwargs)

LazyTensorImpl* lazyImpl(PyObject* obj) {
  if (!THPVariable_Check(obj)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.device().type() != kLazy) return nullptr;
  return dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl());
}

// state(t): t's trace state, or None when t is not a lazy tensor of ours.
PyObject* stateOf(PyObject*, PyObject* obj) {
  LazyTensorImpl* impl = lazyImpl(obj);
  PyObject* state = impl != nullptr ? impl->state() : Py_None;
  Py_INCREF(state);
  return state;
}

PyMethodDef stateDef = {"state", stateOf, METH_O,
                        "state(t): the trace state of lazy tensor t (tensor.State), None for any other object"};

}  // namespace

// make(meta, state, dtype): a lazy tensor with meta's sizes, strides, offset
// and conjugate/negative bits, ``dtype`` (the representation's dtype of a
// quantized tensor is meta's), holding ``state``.
at::Tensor make(const at::Tensor& meta, py::object state, std::optional<at::ScalarType> dtype) {
  auto type = dtype ? c10::scalarTypeToTypeMeta(*dtype) : meta.dtype();
  auto impl = c10::make_intrusive<LazyTensorImpl>(type, state.release().ptr());
  impl->set_sizes_and_strides(meta.sizes(), meta.strides(), meta.storage_offset());
  if (meta.is_conj()) impl->_set_conj(true);
  if (meta.is_neg()) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

// The kernel of every op on lazy tensors: tensor.dispatch(func, args, kwargs)
// with the op's OpOverload, its arguments as __torch_dispatch__ gets them.
static std::mutex gOpsMutex;
static std::unordered_map<const c10::FunctionSchema*, PyObject*> gOps;  // OpOverloads, kept for ever

PyObject* opOverload(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  {
    std::lock_guard<std::mutex> lock(gOpsMutex);
    auto it = gOps.find(key);
    if (it != gOps.end()) return it->second;
  }
  const auto& name = op.operator_name();
  auto sep = name.name.find("::");
  py::object packet = py::module_::import("torch")
                          .attr("ops")
                          .attr(py::str(name.name.substr(0, sep)))
                          .attr(py::str(name.name.substr(sep + 2)));
  py::object overload = packet.attr(py::str(name.overload_name.empty() ? "default" : name.overload_name));
  std::lock_guard<std::mutex> lock(gOpsMutex);
  auto [it, fresh] = gOps.emplace(key, overload.ptr());
  if (fresh) overload.release();
  return it->second;
}

// An argument as __torch_dispatch__ shows it: dtypes, layouts and memory
// formats as their Python objects, wrapped numbers as Python scalars.
py::object toPython(const c10::Argument& arg, const c10::IValue& value) {
  if (value.isNone()) return py::none();
  auto is = [&](c10::TypeKind kind) {
    const auto& t = arg.real_type();
    if (t->kind() == kind) return true;
    auto optional = t->cast<c10::OptionalType>();
    return optional && optional->getElementType()->kind() == kind;
  };
  if (is(c10::ScalarTypeType::Kind))
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(value.toInt()))));
  if (is(c10::LayoutType::Kind))
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(value.toInt()))));
  if (is(c10::MemoryFormatType::Kind))
    return py::reinterpret_borrow<py::object>(
        torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(value.toInt())));
  return torch::jit::toPyObject(value);
}

bool isDefault(const c10::Argument& formal, const c10::IValue& value) {
  const auto& d = formal.default_value();
  return d.has_value() && *d == value;
}

CallShape callShape(const c10::FunctionSchema& schema, const c10::IValue* arguments) {
  const auto& formals = schema.arguments();
  size_t kwargStart = formals.size();
  while (kwargStart > 0 && formals[kwargStart - 1].kwarg_only()) --kwargStart;
  size_t positional = kwargStart;
  while (positional > 0 && isDefault(formals[positional - 1], arguments[positional - 1])) --positional;
  return {positional, kwargStart};
}

std::pair<py::tuple, py::dict> toPythonCall(const c10::FunctionSchema& schema, const c10::IValue* arguments) {
  const auto& formals = schema.arguments();
  const CallShape shape = callShape(schema, arguments);
  py::tuple args(shape.positional);
  for (size_t i = 0; i < shape.positional; ++i) args[i] = toPython(formals[i], arguments[i]);
  py::dict kwargs;
  for (size_t i = shape.kwargStart; i < formals.size(); ++i)
    if (!isDefault(formals[i], arguments[i])) kwargs[py::str(formals[i].name())] = toPython(formals[i], arguments[i]);
  return {std::move(args), std::move(kwargs)};
}

namespace {

void pushResults(const c10::OperatorHandle& op, torch::jit::Stack* stack, const py::object& out) {
  const auto& returns = op.schema().returns();
  if (returns.empty()) {
    TORCH_CHECK(out.is_none(), "lazymlir: ", op.operator_name(), " returned a value where its schema has none");
  } else if (returns.size() == 1) {
    torch::jit::push(stack, torch::jit::toIValue(out, returns[0].real_type()));
  } else {
    auto outs = py::cast<py::sequence>(out);
    TORCH_CHECK(outs.size() == returns.size(), "lazymlir: ", op.operator_name(), " returned ", outs.size(),
                " values where its schema has ", returns.size());
    for (const auto i : c10::irange(outs.size()))
      torch::jit::push(stack, torch::jit::toIValue(outs[i], returns[i].real_type()));
  }
}

// Devices as CUDA has them: an op on lazy tensors takes no tensor of another
// device (recorded, a CPU tensor would become device data, and its gradient
// a lazy tensor that autograd then refuses for it, at backward), except
// those CUDA takes too: CPU tensors of no dimension (scalars, as
// TensorIterator takes them), the source of a copy, advanced indexing's
// indices, foreach ops' scalar lists (their elements' ops are checked), the
// CPU lengths and batch sizes of packed sequences and CTC loss, and every
// op of another namespace (collectives, custom ops: their kernels decide).
enum class DeviceRule : int8_t { kCheck, kSkip, kNotIndices };

DeviceRule deviceRuleOf(const c10::OperatorName& name) {
  static const std::unordered_set<std::string> skip = {"_to_copy",
                                                       "copy_",
                                                       "copy",
                                                       "_copy_from",
                                                       "_copy_from_and_resize",
                                                       "to",
                                                       "is_same_size",
                                                       "is_set_to",
                                                       "_has_same_storage_numel",
                                                       "tensor_split",
                                                       "_pack_padded_sequence",
                                                       "_pad_packed_sequence",
                                                       "_pack_padded_sequence_backward",
                                                       "lstm",
                                                       "gru",
                                                       "rnn_tanh",
                                                       "rnn_relu",
                                                       "ctc_loss",
                                                       "_ctc_loss",
                                                       "_ctc_loss_backward"};
  static const std::unordered_set<std::string> indices = {
      "index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index", "_unsafe_index_put"};
  if (name.name.rfind("aten::", 0) != 0) return DeviceRule::kSkip;
  const std::string base = name.name.substr(6);
  if (skip.count(base) || base.rfind("_foreach_", 0) == 0) return DeviceRule::kSkip;
  return indices.count(base) ? DeviceRule::kNotIndices : DeviceRule::kCheck;
}

void checkDevice(const at::Tensor& t) {
  if (!t.defined()) return;
  const c10::Device device = t.device();
  if (device.type() == kLazy || device.type() == c10::kMeta || (device.is_cpu() && t.dim() == 0)) return;
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
              c10::Device(kLazy, 0), " and ", device, "!");
}

std::unordered_map<const c10::FunctionSchema*, DeviceRule> gDeviceRules;  // the GIL guards it

void checkDevices(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  auto found = gDeviceRules.find(&op.schema());
  if (found == gDeviceRules.end()) found = gDeviceRules.emplace(&op.schema(), deviceRuleOf(op.operator_name())).first;
  if (found->second == DeviceRule::kSkip) return;
  const size_t n = op.schema().arguments().size();
  const c10::IValue* arguments = stack.data() + stack.size() - n;
  for (size_t i = 0; i < n; ++i) {
    if (i == 1 && found->second == DeviceRule::kNotIndices) continue;  // indices(self, indices, ...)
    const c10::IValue& v = arguments[i];
    if (v.isTensor()) {
      checkDevice(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) checkDevice(t);
    } else if (v.isList()) {  // Tensor?[]
      for (const c10::IValue& x : v.toListRef())
        if (x.isTensor()) checkDevice(x.toTensor());
    }
  }
}

void lazyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  TORCH_CHECK(gDispatch != nullptr,
              "lazymlir: the lazy device's tracer is not loaded: `import lazymlir` before using the lazy device "
              "(`import torch` only registers the device)");
  releaseDropped();
  // The fast paths take lazy tensors and wrapped numbers only (other tensors
  // come here): the device check costs them nothing.
  if (tryFast(op, stack) || tryForeach(op, stack)) return;
  checkDevices(op, *stack);
  const auto& schema = op.schema();
  auto arguments = torch::jit::pop(*stack, schema.arguments().size());
  auto [args, kwargs] = toPythonCall(schema, arguments.data());
  PyObject* func = opOverload(op);
  PyObject* callArgs[] = {func, args.ptr(), kwargs.ptr()};
  PyObject* out = PyObject_Vectorcall(gDispatch, callArgs, 3, nullptr);
  if (out == nullptr) throw py::error_already_set();
  pushResults(op, stack, py::reinterpret_steal<py::object>(out));
}

void lazyFallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  lazyKernel(op, stack);
}

const char* layoutName(c10::Layout layout) {
  switch (layout) {
    case c10::kSparse:
      return "torch.sparse_coo";
    case c10::kSparseCsr:
      return "torch.sparse_csr";
    case c10::kSparseCsc:
      return "torch.sparse_csc";
    case c10::kSparseBsr:
      return "torch.sparse_bsr";
    case c10::kSparseBsc:
      return "torch.sparse_bsc";
    default:
      return "sparse";
  }
}

// Sparse tensors on the lazy device: PyTorch builds some itself (a CSR
// tensor's .to("lazy") happens inside its CPU kernel); any op on one says
// what ir.device_data says when one is made through the tracer.
void sparseKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const char* layout = "sparse";
  for (const auto& v : torch::jit::last(*stack, op.schema().arguments().size())) {
    if (v.isTensor() && v.toTensor().layout() != c10::kStrided) {
      layout = layoutName(v.toTensor().layout());
      break;
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "lazymlir: ", layout, " tensors cannot live on the lazy device; keep them ",
                              "on the CPU (or convert with .to_dense()) (", op.operator_name(), ")");
}

// A compressed sparse tensor's .to("lazy") reaches _to_copy on
// SparseCsrPrivateUse1 (BackendSelect adds the target device's key), where
// PyTorch's composite kernel would build a lazy CSR tensor: refused there.
at::Tensor compressedToCopy(const at::Tensor& self, std::optional<at::ScalarType>, std::optional<at::Layout>,
                            std::optional<at::Device>, std::optional<bool>, bool, std::optional<at::MemoryFormat>) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "lazymlir: ", layoutName(self.layout()),
                              " tensors cannot live on the lazy device; keep ",
                              "them on the CPU (or convert with .to_dense())");
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) { m.impl("_to_copy", TORCH_FN(compressedToCopy)); }

// detach, alias, lift_fresh: a new tensor with the same metadata, storage,
// view chain and value, made here and not in Python, so that it has no Python
// object yet (nn.Parameter(t) makes the Parameter the Python object of
// t.detach()'s TensorImpl).
void aliasKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  at::Tensor self = torch::jit::pop(*stack).toTensor();
  auto* impl = dynamic_cast<LazyTensorImpl*>(self.unsafeGetTensorImpl());
  if (impl == nullptr) {  // not ours (FakeTensor's meta tensor with the lazy device's keys): a plain alias
    torch::jit::push(stack, at::Tensor(self.unsafeGetTensorImpl()->shallow_copy_and_detach(
                                c10::VariableVersion(0), /*allow_tensor_metadata_change=*/true)));
    return;
  }
  torch::jit::push(stack, at::Tensor(impl->copyWith(c10::VariableVersion(0), /*allowMetadataChange=*/true)));
}

// The fallback of operators with no kernel of their own on the lazy device,
// registered as the module loads: before install() (the device registered by
// PyTorch's backend autoload, lazymlir not imported) an op on it says so.
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&lazyFallback>()); }

// Registered at install(): every operator known then that has no
// CompositeImplicitAutograd kernel (those decompose before reaching the
// device); a kernel PyTorch registered for PrivateUse1 (c10d's collectives)
// is replaced, quietly.
std::vector<c10::RegistrationHandleRAII> gRegistrations;

struct QuietWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

size_t registerKernels() {
  auto& dispatcher = c10::Dispatcher::singleton();
  QuietWarnings quiet;
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  size_t count = 0;
  for (const auto& name : dispatcher.getAllOpNames()) {
    auto op = dispatcher.findOp(name);
    if (!op || !op->hasSchema()) continue;
    if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    bool alias = name.overload_name.empty() &&
                 (name.name == "aten::detach" || name.name == "aten::alias" || name.name == "aten::lift_fresh");
    gRegistrations.push_back(dispatcher.registerImpl(name, c10::DispatchKey::PrivateUse1,
                                                     alias
                                                         ? c10::KernelFunction::makeFromBoxedFunction<&aliasKernel>()
                                                         : c10::KernelFunction::makeFromBoxedFunction<&lazyFallback>(),
                                                     std::nullopt, nullptr, "lazymlir lazy device"));
    ++count;
  }
  for (auto key : {c10::DispatchKey::SparsePrivateUse1, c10::DispatchKey::SparseCsrPrivateUse1})
    gRegistrations.push_back(dispatcher.registerFallback(
        key, c10::KernelFunction::makeFromBoxedFunction<&sparseKernel>(), "lazymlir lazy device"));
  return count;
}

// install(dispatch, copy_state): the Python half; registers the kernels once.
size_t install(py::object dispatch, py::object copyState) {
  Py_XSETREF(gDispatch, dispatch.release().ptr());
  Py_XSETREF(gCopyState, copyState.release().ptr());
  gMainThread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  static size_t count = registerKernels();
  return count;
}

}  // namespace

void defineTensor(py::module_& m) {
  m.def("install", &install, py::arg("dispatch"), py::arg("copy_state"));
  m.def("make", &make, py::arg("meta"), py::arg("state"), py::arg("dtype") = py::none());
  m.add_object("state", py::reinterpret_steal<py::object>(PyCFunction_New(&stateDef, nullptr)));
  defineFastPath(m);
  defineCollect(m);
  defineReplay(m);
  defineForeach(m);
}

}  // namespace lazymlir::device

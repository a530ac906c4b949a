// The fast path: ops recorded without running Python code.
//
// An op whose handler is ops._functional (functional), ops._view (a view) or
// ops._inplace (an in-place op on a tensor that is no view), called on lazy
// tensors and constants only (ints, floats, bools, int lists, None), is
// recorded here once its output metadata is known for its input metadata and
// constants: the trace.Node, tensor.Storage and tensor.State objects are built
// in C++ exactly as the Python handler builds them. The first call of each
// (op, input metadata, constants) asks Python (ops.fast_meta) and the answer
// is kept here, "not here" included; everything else goes to tensor.dispatch.
// ops.forget_handler forgets it all (a new eager mark, config.force_fallback).

#include "LazyTensor.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <structmember.h>  // PyMemberDef: where a __slots__ attribute lives

#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lazymlir::device {
namespace {

// Where a __slots__ attribute of a Python class lives in its objects.
Py_ssize_t slotOffset(const py::object& type, const char* name) {
  py::object descr = type.attr(name);
  TORCH_CHECK(Py_IS_TYPE(descr.ptr(), &PyMemberDescr_Type), "lazymlir: ", name, " is not a slot");
  return reinterpret_cast<PyMemberDescrObject*>(descr.ptr())->d_member->offset;
}

PyObject*& slot(PyObject* obj, Py_ssize_t offset) {
  return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset);
}

// Stores a new reference to value in a slot, dropping what it held.
void setSlot(PyObject* obj, Py_ssize_t offset, PyObject* value) {
  Py_INCREF(value);
  PyObject* old = slot(obj, offset);
  slot(obj, offset) = value;
  Py_XDECREF(old);
}

enum Kind : int { kFunctional = 0, kView = 1, kInplace = 2 };

struct Python {
  PyTypeObject* nodeType = nullptr;
  PyTypeObject* stateType = nullptr;
  PyObject* storageType = nullptr;
  PyObject* stateValue = nullptr;  // tensor._state_value(state)
  PyObject* registerPending = nullptr;  // tensor._register(storage)
  PyObject* info = nullptr;        // ops.fast_info(func) -> (kind, name, lifted, recorded op) or None
  PyObject* meta = nullptr;        // ops.fast_meta(func, args, kwargs) -> meta / ViewStep or None
  PyObject* blank = nullptr;       // trace.BLANK
  PyObject* f = nullptr;           // "f", "b": trace.freeze()'s tags
  PyObject* b = nullptr;
  PyObject* zero = nullptr;
  PyObject* one = nullptr;
  PyObject* emptyTuple = nullptr;
  struct {
    Py_ssize_t op, args, kwargs, inputs, sig, meta, data, job, kernels;
  } node{};
  struct {
    Py_ssize_t meta, storage, chain, value, version;
  } state{};
  struct {
    Py_ssize_t base, version;
  } storage{};
  struct {
    Py_ssize_t rest, kwargs, meta, sig;  // ViewStep's fields (a NamedTuple: indices)
  } step{1, 2, 3, 4};
} gPy;

struct FastOp {
  bool known = false;
  int kind = -1;              // -1: never here
  PyObject* name = nullptr;   // the recorded op's name in signatures
  PyObject* recorded = nullptr;  // the op the node records (in-place: its functional variant)
  bool lifted = false;        // trace.LIFTED_OPS: floats are graph inputs, not in the metadata key
};
std::unordered_map<const c10::FunctionSchema*, FastOp> gOps;

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    size_t h = 0xcbf29ce484222325ull;
    for (int64_t v : key) h = (h ^ static_cast<size_t>(v)) * 0x100000001b3ull;
    return h;
  }
};
// (op, per argument: kind and meta or value) -> output meta (a ViewStep for
// views), or None: not here.
std::unordered_map<std::vector<int64_t>, PyObject*, KeyHash> gAnswers;

void forget() {
  for (auto& [_, op] : gOps) {
    Py_XDECREF(op.name);
    Py_XDECREF(op.recorded);
  }
  gOps.clear();
  for (auto& [_, answer] : gAnswers) Py_DECREF(answer);
  gAnswers.clear();
}

const FastOp& fastOp(const c10::OperatorHandle& op) {
  FastOp& f = gOps[&op.schema()];
  if (!f.known) {
    PyObject* info = PyObject_CallOneArg(gPy.info, opOverload(op));
    if (info == nullptr) throw py::error_already_set();
    if (info != Py_None) {
      f.kind = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(info, 0)));
      f.name = Py_NewRef(PyTuple_GET_ITEM(info, 1));
      f.lifted = PyTuple_GET_ITEM(info, 2) == Py_True;
      f.recorded = Py_NewRef(PyTuple_GET_ITEM(info, 3));
    }
    Py_DECREF(info);
    f.known = true;
  }
  return f;
}

// Ints that Python sees as other objects (dtypes, layouts, memory formats).
bool isEnum(const c10::Argument& formal) {
  c10::TypePtr t = formal.real_type();
  if (auto optional = t->cast<c10::OptionalType>()) t = optional->getElementType();
  auto kind = t->kind();
  return kind == c10::ScalarTypeType::Kind || kind == c10::LayoutType::Kind || kind == c10::MemoryFormatType::Kind;
}

// One argument: a lazy tensor's state, or a constant (a wrapped number as the
// scalar it stands for).
struct Arg {
  const c10::Argument* formal = nullptr;
  PyObject* state = nullptr;  // borrowed (the tensor on the stack holds it)
  c10::IValue value;
  bool isEnum = false;  // value is a dtype, layout or memory format
};

// Appends an argument to the key; false when the fast path does not take it.
bool keyOf(const c10::IValue& v, bool lifted, Arg& arg, std::vector<int64_t>& key) {
  if (v.isInt() && arg.formal != nullptr && isEnum(*arg.formal)) {  // a dtype, layout or memory format
    arg.value = v;
    arg.isEnum = true;
    key.push_back(8);
    key.push_back(v.toInt());
    return true;
  }
  if (v.isSymInt()) {
    auto concrete = v.toSymInt().maybe_as_int();
    return concrete && keyOf(c10::IValue(*concrete), lifted, arg, key);
  }
  if (v.isSymIntList()) {
    std::vector<int64_t> ints;
    for (const c10::SymInt& x : v.toSymIntList()) {
      auto concrete = x.maybe_as_int();
      if (!concrete) return false;
      ints.push_back(*concrete);
    }
    return keyOf(c10::IValue(ints), lifted, arg, key);
  }
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
      switch (t.scalar_type()) {
        case at::kDouble: arg.value = t.item<double>(); break;
        case at::kLong: arg.value = t.item<int64_t>(); break;
        case at::kBool: arg.value = t.item<bool>(); break;
        default: return false;
      }
      return keyOf(arg.value, lifted, arg, key);
    }
    auto* impl = dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl());
    if (impl == nullptr) return false;
    arg.state = impl->state();
    key.push_back(1);
    key.push_back(reinterpret_cast<int64_t>(slot(arg.state, gPy.state.meta)));
    return true;
  }
  arg.value = v;
  if (v.isDouble()) {
    double d = v.toDouble();
    if (d != d || d == 0.0) return false;  // NaN, 0.0, -0.0: freeze() spells them by repr
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    key.push_back(2);
    key.push_back(lifted ? 0 : bits);
  } else if (v.isBool()) {
    key.push_back(4);
    key.push_back(v.toBool());
  } else if (v.isInt()) {
    key.push_back(3);
    key.push_back(v.toInt());
  } else if (v.isIntList()) {
    auto list = v.toIntList();
    key.push_back(5);
    key.push_back(static_cast<int64_t>(list.size()));
    for (int64_t x : list) key.push_back(x);
  } else if (v.isNone()) {
    key.push_back(6);
  } else {
    return false;
  }
  return true;
}

// (node argument, frozen constant) of a constant, as trace.freeze spells it.
std::pair<py::object, py::object> constant(const c10::IValue& v) {
  if (v.isDouble()) {
    py::object x = py::float_(v.toDouble());
    return {x, py::make_tuple(py::reinterpret_borrow<py::object>(gPy.f), x)};
  }
  if (v.isBool()) {
    py::object x = py::bool_(v.toBool());
    return {x, py::make_tuple(py::reinterpret_borrow<py::object>(gPy.b), x)};
  }
  if (v.isInt()) {
    py::object x = py::int_(v.toInt());
    return {x, x};
  }
  if (v.isIntList()) {
    auto list = v.toIntList();
    py::list x(list.size());
    py::tuple frozen(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      py::object item = py::int_(static_cast<int64_t>(list.get(i)));
      x[i] = item;
      frozen[i] = item;
    }
    return {x, frozen};
  }
  return {py::none(), py::none()};
}

// A tensor's current value node (tensor._state_value).
py::object valueOf(PyObject* state) {
  PyObject* storage = slot(state, gPy.state.storage);
  if (PyLong_AsLongLong(slot(state, gPy.state.version)) == PyLong_AsLongLong(slot(storage, gPy.storage.version)))
    return py::reinterpret_borrow<py::object>(slot(state, gPy.state.value));
  PyObject* v = PyObject_CallOneArg(gPy.stateValue, state);
  if (v == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(v);
}

// A new object of a __slots__ class, its slots set from (offset, value).
py::object newSlotted(PyTypeObject* type, std::initializer_list<std::pair<Py_ssize_t, PyObject*>> slots) {
  PyObject* obj = type->tp_alloc(type, 0);
  if (obj == nullptr) throw py::error_already_set();
  for (const auto& [offset, value] : slots) setSlot(obj, offset, value);
  return py::reinterpret_steal<py::object>(obj);
}

py::object newNode(PyObject* op, PyObject* args, PyObject* kwargs, PyObject* inputs, PyObject* sig,
                   PyObject* meta) {
  const auto& n = gPy.node;
  return newSlotted(gPy.nodeType, {{n.op, op}, {n.args, args}, {n.kwargs, kwargs}, {n.inputs, inputs},
                                   {n.sig, sig}, {n.meta, meta}, {n.data, Py_None}, {n.job, Py_None},
                                   {n.kernels, Py_None}});
}

// A lazy tensor holding a new State.
at::Tensor newTensor(PyObject* meta, PyObject* storage, PyObject* chain, PyObject* value, PyObject* version) {
  const auto& s = gPy.state;
  py::object state = newSlotted(gPy.stateType, {{s.meta, meta}, {s.storage, storage}, {s.chain, chain},
                                                {s.value, value}, {s.version, version}});
  return make(THPVariable_Unpack(meta), std::move(state), std::nullopt);
}

}  // namespace

bool tryFast(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (gPy.info == nullptr) return false;
  const FastOp& f = fastOp(op);
  if (f.kind < 0) return false;
  // Held here: Python code called below may forget the tables.
  const int kind = f.kind;
  const bool lifted = f.lifted;
  py::object name = py::reinterpret_borrow<py::object>(f.name);
  py::object recorded = py::reinterpret_borrow<py::object>(f.recorded);

  const auto& schema = op.schema();
  const auto& formals = schema.arguments();
  const size_t n = formals.size();
  c10::IValue* arguments = stack->data() + stack->size() - n;
  auto isDefault = [&](size_t i) {
    const auto& d = formals[i].default_value();
    return d.has_value() && *d == arguments[i];
  };
  size_t kwargStart = n;
  while (kwargStart > 0 && formals[kwargStart - 1].kwarg_only()) --kwargStart;
  size_t positional = kwargStart;
  while (positional > 0 && isDefault(positional - 1)) --positional;

  // The arguments as tensor.dispatch would get them: positional ones, then
  // keyword-only ones that differ from their defaults.
  c10::SmallVector<Arg, 8> args;
  c10::SmallVector<size_t, 2> kwargs;  // indices into args
  std::vector<int64_t> key;
  key.reserve(2 + 2 * n);
  key.push_back(reinterpret_cast<int64_t>(&schema));
  for (size_t i = 0; i < n; ++i) {
    if (i >= positional && i < kwargStart) continue;
    if (i >= kwargStart) {
      if (isDefault(i)) continue;
      if (kind == kView) return false;
      key.push_back(7);
      key.push_back(static_cast<int64_t>(i));
      kwargs.push_back(args.size());
    }
    Arg& a = args.emplace_back();
    a.formal = &formals[i];
    if (!keyOf(arguments[i], lifted, a, key)) return false;
  }
  if (args.empty() || ((kind == kView || kind == kInplace) && args[0].state == nullptr)) return false;
  PyObject* self = args[0].state;
  if (kind == kInplace && PyTuple_GET_SIZE(slot(self, gPy.state.chain)) != 0) return false;  // a view: Python

  auto found = gAnswers.find(key);
  if (found == gAnswers.end()) {
    // First time: ops.fast_meta infers (or finds) the output metadata.
    py::tuple pyArgs(args.size() - kwargs.size());
    py::dict pyKwargs;
    size_t k = 0, p = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      const size_t index = static_cast<size_t>(args[i].formal - formals.data());
      py::object v = toPython(*args[i].formal, arguments[index]);
      if (k < kwargs.size() && kwargs[k] == i) {
        pyKwargs[py::str(args[i].formal->name())] = v;
        ++k;
      } else {
        pyArgs[p++] = v;
      }
    }
    PyObject* answer =
        PyObject_CallFunctionObjArgs(gPy.meta, opOverload(op), pyArgs.ptr(), pyKwargs.ptr(), nullptr);
    if (answer == nullptr) throw py::error_already_set();
    found = gAnswers.emplace(std::move(key), answer).first;
  }
  py::object answer = py::reinterpret_borrow<py::object>(found->second);
  if (answer.is_none()) return false;

  if (kind == kView) {
    // ops._view: the node views self's value; the tensor shares self's
    // storage, its chain grows by the step.
    PyObject* step = answer.ptr();
    py::object value = valueOf(self);
    py::object rest = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(step, gPy.step.rest));
    py::tuple nodeArgs(1 + PyTuple_GET_SIZE(rest.ptr()));
    nodeArgs[0] = value;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(rest.ptr()); ++i)
      nodeArgs[i + 1] = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(rest.ptr(), i));
    PyObject* meta = PyTuple_GET_ITEM(step, gPy.step.meta);
    py::object node = newNode(recorded.ptr(), nodeArgs.ptr(), PyTuple_GET_ITEM(step, gPy.step.kwargs),
                              py::make_tuple(value).ptr(), PyTuple_GET_ITEM(step, gPy.step.sig), meta);
    PyObject* storage = slot(self, gPy.state.storage);
    PyObject* chain = slot(self, gPy.state.chain);
    py::tuple longer(PyTuple_GET_SIZE(chain) + 1);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(chain); ++i)
      longer[i] = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(chain, i));
    longer[PyTuple_GET_SIZE(chain)] = py::reinterpret_borrow<py::object>(step);
    at::Tensor out = newTensor(meta, storage, longer.ptr(), node.ptr(), slot(storage, gPy.storage.version));
    torch::jit::drop(*stack, n);
    torch::jit::push(stack, std::move(out));
    return true;
  }

  // ops._functional and ops._inplace: the node applies the (functional) op.
  PyObject* meta = answer.ptr();
  const size_t nPositional = args.size() - kwargs.size();
  size_t tensors = 0;
  for (const auto& a : args) tensors += a.state != nullptr;
  py::tuple nodeArgs(nPositional), frozen(nPositional), inputs(tensors);
  py::dict nodeKwargs;
  py::tuple frozenKwargs(kwargs.size());
  size_t input = 0, k = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    py::object v, fz;
    if (a.state != nullptr) {
      v = valueOf(a.state);
      inputs[input++] = v;
      fz = py::reinterpret_borrow<py::object>(gPy.blank);
    } else if (a.isEnum) {
      v = toPython(*a.formal, a.value);  // torch.float16, torch.channels_last: freeze() keeps them as they are
      fz = v;
    } else {
      std::tie(v, fz) = constant(a.value);
    }
    if (k < kwargs.size() && kwargs[k] == i) {
      py::str argName(a.formal->name());
      nodeKwargs[argName] = v;
      frozenKwargs[k++] = py::make_tuple(argName, fz);
    } else {
      nodeArgs[i] = v;
      frozen[i] = fz;
    }
  }
  py::tuple sig = py::make_tuple(name, frozen, frozenKwargs);
  py::object node = newNode(recorded.ptr(), nodeArgs.ptr(), nodeKwargs.ptr(), inputs.ptr(), sig.ptr(), meta);

  if (kind == kInplace) {
    // tensor._write on a tensor that is no view: the storage's base is the
    // new value, its version moves, the storage is pending.
    PyObject* storage = slot(self, gPy.state.storage);
    setSlot(storage, gPy.storage.base, node.ptr());
    py::object version = py::reinterpret_steal<py::object>(
        PyNumber_Add(slot(storage, gPy.storage.version), gPy.one));
    if (!version) throw py::error_already_set();
    setSlot(storage, gPy.storage.version, version.ptr());
    setSlot(self, gPy.state.value, node.ptr());
    setSlot(self, gPy.state.version, version.ptr());
    PyObject* done = PyObject_CallOneArg(gPy.registerPending, storage);
    if (done == nullptr) throw py::error_already_set();
    Py_DECREF(done);
    at::Tensor out = arguments[0].toTensor();  // in-place: returns self
    torch::jit::drop(*stack, n);
    torch::jit::push(stack, std::move(out));
    return true;
  }

  PyObject* storage = PyObject_CallFunctionObjArgs(gPy.storageType, node.ptr(), meta, nullptr);
  if (storage == nullptr) throw py::error_already_set();
  py::object storageRef = py::reinterpret_steal<py::object>(storage);
  at::Tensor out = newTensor(meta, storage, gPy.emptyTuple, node.ptr(), gPy.zero);
  torch::jit::drop(*stack, n);
  torch::jit::push(stack, std::move(out));
  return true;
}

// ---------------------------------------------------------------------------
// trace.collect: the graph a barrier needs, walked back from its outputs to
// device data in a deterministic order, and its cache key (one entry per
// node). What the Python version did, without a Python frame per node.

namespace {

struct Collect {
  PyObject* graphType = nullptr;  // trace.Graph
  PyObject* densePerm = nullptr;  // trace.dense_perm(shape, stride)
  PyObject* lifting = nullptr;    // trace._lifting(node)
  PyObject* lift = nullptr;       // trace._LIFT: the ops whose floats may be lifted
} gCollect;

py::object call(PyObject* f, std::initializer_list<py::handle> args) {
  py::tuple t(args.size());
  size_t i = 0;
  for (auto a : args) t[i++] = py::reinterpret_borrow<py::object>(a);
  PyObject* r = PyObject_Call(f, t.ptr(), nullptr);
  if (r == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

py::object sizeOf(const at::Tensor& t) {
  py::tuple dims(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) dims[i] = py::int_(t.size(i));
  return call(reinterpret_cast<PyObject*>(&THPSizeType), {dims});
}

py::object dtypeOf(const at::Tensor& t) {
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type())));
}

// None for a contiguous layout, else trace.dense_perm of it.
py::object permOf(const at::Tensor& t) {
  if (t.is_contiguous()) return py::none();
  return call(gCollect.densePerm, {sizeOf(t), py::cast(t.strides().vec())});
}

py::object collect(py::sequence outputs, py::object options) {
  TORCH_CHECK(gCollect.graphType != nullptr, "lazymlir: the tracer is not installed (import lazymlir)");
  std::unordered_map<PyObject*, Py_ssize_t> index;
  py::list entries, inputs, nodes, scalars, inputPerms;
  py::dict lifted;
  std::vector<PyObject*> stack;
  for (py::handle out : outputs) {
    if (index.count(out.ptr())) continue;
    stack.push_back(out.ptr());
    while (!stack.empty()) {
      PyObject* n = stack.back();
      if (index.count(n)) {
        stack.pop_back();
        continue;
      }
      PyObject* data = slot(n, gPy.node.data);
      if (data != Py_None) {  // device data: a graph input
        index[n] = static_cast<Py_ssize_t>(entries.size());
        const at::Tensor& d = THPVariable_Unpack(data);
        py::object perm = permOf(d);
        if (perm.is_none())
          entries.append(py::make_tuple(sizeOf(d), dtypeOf(d)));
        else
          entries.append(py::make_tuple(sizeOf(d), dtypeOf(d), perm));
        inputPerms.append(perm);
        inputs.append(n);
        stack.pop_back();
        continue;
      }
      PyObject* ins = slot(n, gPy.node.inputs);
      const size_t before = stack.size();
      for (Py_ssize_t i = PyTuple_GET_SIZE(ins) - 1; i >= 0; --i)
        if (!index.count(PyTuple_GET_ITEM(ins, i))) stack.push_back(PyTuple_GET_ITEM(ins, i));
      if (stack.size() != before) continue;  // its inputs first, the first one on top
      stack.pop_back();
      index[n] = static_cast<Py_ssize_t>(entries.size());
      py::object sig = py::reinterpret_borrow<py::object>(slot(n, gPy.node.sig));
      int lift = PyDict_Contains(gCollect.lift, PyTuple_GET_ITEM(sig.ptr(), 0));
      if (lift < 0) throw py::error_already_set();
      if (lift) {
        py::object found = call(gCollect.lifting, {n});
        if (!found.is_none()) {  // (positions, values, lifted signature)
          py::object positions = found[py::int_(0)];
          lifted[n] = py::make_tuple(py::int_(scalars.size()), positions);
          py::object dtype = dtypeOf(THPVariable_Unpack(slot(n, gPy.node.meta)));
          for (py::handle v : py::reinterpret_borrow<py::tuple>(found[py::int_(1)]))
            scalars.append(py::make_tuple(v, dtype));
          sig = found[py::int_(2)];
        }
      }
      py::tuple at(PyTuple_GET_SIZE(ins));
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ins); ++i) at[i] = py::int_(index[PyTuple_GET_ITEM(ins, i)]);
      entries.append(py::make_tuple(sig, at));
      nodes.append(n);
    }
  }
  py::list outs(outputs.size()), outputPerms(outputs.size());
  py::tuple outIndex(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    py::object o = outputs[i];
    outs[i] = o;
    outIndex[i] = py::int_(index[o.ptr()]);
    outputPerms[i] = permOf(THPVariable_Unpack(slot(o.ptr(), gPy.node.meta)));
  }
  py::tuple key = py::make_tuple(py::tuple(entries), outIndex, py::tuple(outputPerms), options);
  return call(gCollect.graphType, {key, inputs, nodes, outs, scalars, lifted, inputPerms, outputPerms});
}

void installCollect(py::object graphType, py::object densePerm, py::object lifting, py::object lift) {
  gCollect.densePerm = densePerm.release().ptr();
  gCollect.lifting = lifting.release().ptr();
  gCollect.lift = lift.release().ptr();
  gCollect.graphType = graphType.release().ptr();
}

void install(py::object nodeType, py::object storageType, py::object stateType, py::object stateValue,
             py::object registerPending, py::object info, py::object meta, py::object blank) {
  gPy.node = {slotOffset(nodeType, "op"),     slotOffset(nodeType, "args"), slotOffset(nodeType, "kwargs"),
              slotOffset(nodeType, "inputs"), slotOffset(nodeType, "sig"),  slotOffset(nodeType, "meta"),
              slotOffset(nodeType, "data"),   slotOffset(nodeType, "job"),  slotOffset(nodeType, "kernels")};
  gPy.state = {slotOffset(stateType, "meta"), slotOffset(stateType, "storage"), slotOffset(stateType, "chain"),
               slotOffset(stateType, "value"), slotOffset(stateType, "version")};
  gPy.storage = {slotOffset(storageType, "base"), slotOffset(storageType, "version")};
  gPy.nodeType = reinterpret_cast<PyTypeObject*>(nodeType.release().ptr());
  gPy.stateType = reinterpret_cast<PyTypeObject*>(stateType.release().ptr());
  gPy.storageType = storageType.release().ptr();
  gPy.stateValue = stateValue.release().ptr();
  gPy.registerPending = registerPending.release().ptr();
  gPy.meta = meta.release().ptr();
  gPy.blank = blank.release().ptr();
  gPy.f = py::str("f").release().ptr();
  gPy.b = py::str("b").release().ptr();
  gPy.zero = py::int_(0).release().ptr();
  gPy.one = py::int_(1).release().ptr();
  gPy.emptyTuple = py::tuple().release().ptr();
  gPy.info = info.release().ptr();  // last: it turns the fast path on
}

}  // namespace

void defineFastPath(py::module_& m) {
  m.def("install_fast", &install, py::arg("node_type"), py::arg("storage_type"), py::arg("state_type"),
        py::arg("state_value"), py::arg("register"), py::arg("fast_info"), py::arg("fast_meta"), py::arg("blank"));
  m.def("install_collect", &installCollect, py::arg("graph_type"), py::arg("dense_perm"), py::arg("lifting"),
        py::arg("lift"));
  m.def("collect", &collect, py::arg("outputs"), py::arg("options") = py::tuple(),
        "trace.collect: the Graph that computes the nodes `outputs`, with its cache key.");
  m.def("forget_fast", &forget, "The fast path asks Python again about every op (ops.forget_handler).");
}

}  // namespace lazymlir::device

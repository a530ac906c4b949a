// The fast path: ops recorded without running Python code.
//
// An op whose handler is ops._functional (functional), ops._view (a view) or
// ops._inplace (an in-place op on a tensor that is no view), called on lazy
// tensors and constants only (ints, floats, bools, int lists, None), is
// recorded here once its output metadata is known for its input metadata and
// constants: the ir.Node, tensor.Storage and tensor.State objects are built
// in C++ exactly as the Python handler builds them. The first call of each
// (op, input metadata, constants) asks Python (ops.fast_meta) and the answer
// is kept here, "not here" included; everything else goes to tensor.dispatch.
// ops.forget_handler forgets it all (a new eager mark, config.force_fallback).

#include "PySlots.h"

#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lazymlir::device {

Python gPy;

namespace {

struct FastOp {
  bool known = false;
  int kind = -1;                 // -1: never here
  PyObject* name = nullptr;      // the recorded op's name in signatures
  PyObject* recorded = nullptr;  // the op the node records (in-place: its functional variant)
  bool lifted = false;           // ir.LIFTED_OPS: floats are graph inputs, not in the metadata key
};
std::unordered_map<const c10::FunctionSchema*, FastOp> gOps;

// (op, per argument: kind and meta or value) -> output meta (a ViewStep for
// views), or None: not here; and the signature of the last node recorded
// from it (the key holds every constant it freezes but lifted floats:
// `bits` holds those).
struct Answer {
  PyObject* meta;
  PyObject* sig = nullptr;
  std::vector<int64_t> bits;
};
std::unordered_map<std::vector<int64_t>, Answer, WordsHash> gAnswers;
size_t gForgotten = 0;  // forget() calls: Python code called while recording may make one

// Writes through views (tensor._write): the nodes that give the storage's
// base its new value when a view with chain (s_1 .. s_k) of it is written,
// as tensor._write_recipes describes them for the chain and the base's
// meta: the views' values s_1 .. s_k-1 of the base (ViewSteps), then per
// step from the last, a scatter node of the value under it and what is
// written, with tensor.WRITE_BASE and tensor.WRITE_SRC marking where they go.
struct Recipes {
  py::object recipes;            // None: Python writes it
  std::vector<py::object> held;  // the steps and meta the key names
};
// Never destroyed: it holds Python objects past the interpreter's end.
auto& gRecipes = *new std::unordered_map<std::vector<int64_t>, Recipes, WordsHash>;

void forget() {
  for (auto& [_, op] : gOps) {
    Py_XDECREF(op.name);
    Py_XDECREF(op.recorded);
  }
  gOps.clear();
  for (auto& [_, answer] : gAnswers) {
    Py_DECREF(answer.meta);
    Py_XDECREF(answer.sig);
  }
  gAnswers.clear();
  gRecipes.clear();
  ++gForgotten;
  forgetForeach();
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
  PyObject* state = nullptr;      // borrowed (the tensor on the stack holds it)
  std::vector<PyObject*> states;  // a list of lazy tensors (cat, stack; index's Tensor?[], nullptr for None): theirs
  bool list = false;
  c10::IValue value;
  bool isEnum = false;    // value is a dtype, layout or memory format
  bool isDevice = false;  // the lazy device (meta._convert records it as the CPU)
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
  if (v.isDevice()) {  // the lazy device only (its index checked by Python: lazy:1 refused there)
    const c10::Device d = v.toDevice();
    if (d.type() != kLazy || d.index() > 0) return false;
    arg.isDevice = true;
    key.push_back(11);
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
  if (v.isTensorList()) {
    auto list = v.toTensorList();
    key.push_back(10);
    key.push_back(static_cast<int64_t>(list.size()));
    for (const at::Tensor& t : list) {
      auto* impl = t.defined() ? dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl()) : nullptr;
      if (impl == nullptr) return false;
      arg.states.push_back(impl->state());
      key.push_back(reinterpret_cast<int64_t>(slot(impl->state(), gPy.state.meta)));
    }
    arg.list = true;
    return true;
  }
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return keyOf(c10::IValue(), lifted, arg, key);  // an optional tensor autograd left out
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
      switch (t.scalar_type()) {
        case at::kDouble:
          arg.value = t.item<double>();
          break;
        case at::kLong:
          arg.value = t.item<int64_t>();
          break;
        case at::kBool:
          arg.value = t.item<bool>();
          break;
        default:
          return false;
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
  } else if (v.isBoolList()) {
    auto list = v.toBoolList();
    key.push_back(9);
    key.push_back(static_cast<int64_t>(list.size()));
    for (bool x : list) key.push_back(x);
  } else if (v.isNone()) {
    key.push_back(6);
  } else if (v.isList()) {  // Tensor?[] (index's indices): lazy tensors and Nones, as meta._convert lists them
    auto list = v.toListRef();
    key.push_back(12);
    key.push_back(static_cast<int64_t>(list.size()));
    for (const c10::IValue& x : list) {
      const at::Tensor* t = x.isTensor() ? &x.toTensor() : nullptr;
      if (x.isNone() || (t != nullptr && !t->defined())) {
        arg.states.push_back(nullptr);
        key.push_back(0);
        continue;
      }
      auto* impl = t != nullptr ? dynamic_cast<LazyTensorImpl*>(t->unsafeGetTensorImpl()) : nullptr;
      if (impl == nullptr) return false;
      arg.states.push_back(impl->state());
      key.push_back(reinterpret_cast<int64_t>(slot(impl->state(), gPy.state.meta)));
    }
    arg.list = true;
  } else {
    return false;
  }
  return true;
}

// What the trace holds (nodes, storages, states, their tuples) lives out of
// the cyclic GC's sight: it never forms a cycle, and a long trace would make
// every collection walk it (a 2000-op chain paid more in collections than in
// recording). `obj` is a tuple, list, dict or slotted object.
template <class T>
T hidden(T obj) {
  PyObject_GC_UnTrack(obj.ptr());
  return obj;
}

// (node argument, frozen constant) of a constant, as ir.freeze spells it;
// the frozen one only `ifFrozen`.
std::pair<py::object, py::object> constant(const c10::IValue& v, bool ifFrozen = true) {
  auto tagged = [&](PyObject* tag, py::object x) {
    return ifFrozen ? hidden(py::make_tuple(py::handle(tag), x)) : py::object();
  };
  if (v.isDouble()) {
    const double d = v.toDouble();
    py::object x = py::float_(d);
    if (d != d || d == 0.0) return {x, tagged(gPy.f, py::repr(x))};  // NaN, 0.0, -0.0: freeze() spells them
    return {x, tagged(gPy.f, x)};
  }
  if (v.isBool()) {
    py::object x = py::bool_(v.toBool());
    return {x, tagged(gPy.b, x)};
  }
  if (v.isInt()) {
    py::object x = py::int_(v.toInt());
    return {x, x};
  }
  if (v.isIntList() || v.isBoolList()) {  // shapes, dims; output masks
    auto list = v.toListRef();
    py::list x(list.size());
    py::tuple frozen(ifFrozen ? list.size() : 0);
    for (size_t i = 0; i < list.size(); ++i) {
      auto [item, fz] = constant(list[i], ifFrozen);
      x[i] = item;
      if (ifFrozen) frozen[i] = fz;
    }
    return {hidden(x), hidden(frozen)};
  }
  return {py::none(), py::none()};
}

// A tensor's current value node (tensor._state_value).
py::object valueOf(PyObject* state) {
  PyObject* storage = slot(state, gPy.state.storage);
  PyObject* value = slot(state, gPy.state.value);
  if (PyLong_AsLongLong(slot(state, gPy.state.version)) == PyLong_AsLongLong(slot(storage, gPy.storage.version)) &&
      (PyTuple_GET_SIZE(slot(state, gPy.state.chain)) == 0 || slot(value, gPy.node.data) != Py_None ||
       slot(slot(storage, gPy.storage.base), gPy.node.data) == Py_None))
    return py::reinterpret_borrow<py::object>(value);
  PyObject* v = PyObject_CallOneArg(gPy.stateValue, state);
  if (v == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(v);
}

// A new object of a __slots__ class, its slots set from (offset, value).
py::object newSlotted(PyTypeObject* type, std::initializer_list<std::pair<Py_ssize_t, PyObject*>> slots) {
  PyObject* obj = type->tp_alloc(type, 0);
  if (obj == nullptr) throw py::error_already_set();
  PyObject_GC_UnTrack(obj);  // see untrack()
  for (const auto& [offset, value] : slots) setSlot(obj, offset, value);
  return py::reinterpret_steal<py::object>(obj);
}

py::object newNode(PyObject* op, PyObject* args, PyObject* kwargs, PyObject* inputs, PyObject* sig, PyObject* meta) {
  const auto& n = gPy.node;
  return newSlotted(gPy.nodeType, {{n.op, op},
                                   {n.args, args},
                                   {n.kwargs, kwargs},
                                   {n.inputs, inputs},
                                   {n.sig, sig},
                                   {n.meta, meta},
                                   {n.data, Py_None},
                                   {n.job, Py_None},
                                   {n.kernels, Py_None}});
}

// tensor._view_node: `op` (the step's own, or the op recorded for it) on
// `value` and the step's other arguments.
py::object viewNode(PyObject* op, PyObject* step, const py::object& value) {
  PyObject* rest = PyTuple_GET_ITEM(step, gPy.step.rest);
  py::tuple args(1 + PyTuple_GET_SIZE(rest));
  args[0] = value;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(rest); ++i)
    args[i + 1] = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(rest, i));
  return newNode(op, hidden(args).ptr(), PyTuple_GET_ITEM(step, gPy.step.kwargs), hidden(py::make_tuple(value)).ptr(),
                 PyTuple_GET_ITEM(step, gPy.step.sig), PyTuple_GET_ITEM(step, gPy.step.meta));
}

// The op's arguments on `stack` replaced by its result.
bool returns(torch::jit::Stack* stack, size_t n, at::Tensor result) {
  torch::jit::drop(*stack, n);
  torch::jit::push(stack, std::move(result));
  return true;
}

// A lazy tensor holding a new State.
at::Tensor newTensor(PyObject* meta, PyObject* storage, PyObject* chain, PyObject* value, PyObject* version) {
  const auto& s = gPy.state;
  py::object state = newSlotted(
      gPy.stateType, {{s.meta, meta}, {s.storage, storage}, {s.chain, chain}, {s.value, value}, {s.version, version}});
  return make(THPVariable_Unpack(meta), std::move(state), std::nullopt);
}

// The storages whose value may not be computed yet, in the order they
// became pending (tensor._register): what mark_step() executes. The order is
// the program's, so the same program gives the same graph (and cache key) at
// every step. Strong references (a weak one would be one more object per
// op): a storage only this list holds is dead to the program, and is dropped
// (by mark_step, or by a prune when the list grows).
struct Pending {
  std::vector<PyObject*> storages;
  PyObject* epoch = nullptr;  // a storage's `step` is the epoch it was registered in
  long long epochValue = 0;
  size_t pruneAt = 4096;
} gPending;

bool alive(PyObject* storage) { return Py_REFCNT(storage) > 1; }

PyObject* epochObject() {
  if (gPending.epoch == nullptr) gPending.epoch = PyLong_FromLongLong(gPending.epochValue);
  return gPending.epoch;
}

// Drops the dead and the computed (a later write registers those again): a
// program that never calls mark_step() keeps the list short.
void prunePending() {
  releaseDropped();
  std::vector<PyObject*> keep;
  for (PyObject* s : gPending.storages) {
    if (alive(s) && slot(slot(s, gPy.storage.base), gPy.node.data) == Py_None) {
      keep.push_back(s);
      continue;
    }
    setSlot(s, gPy.storage.step, gPy.minusOne);
    Py_DECREF(s);
  }
  gPending.storages.swap(keep);
  gPending.pruneAt = std::max<size_t>(4096, 2 * gPending.storages.size());
}

void registerPending(PyObject* storage) {
  PyObject* epoch = epochObject();
  if (epoch == nullptr) throw py::error_already_set();
  PyObject* step = slot(storage, gPy.storage.step);
  if (step == epoch || PyLong_AsLongLong(step) == gPending.epochValue) return;
  setSlot(storage, gPy.storage.step, epoch);
  gPending.storages.push_back(Py_NewRef(storage));
  if (gPending.storages.size() > gPending.pruneAt) prunePending();
}

// Takes `storage` off the list (its next registration puts it last): a
// storage made by a fill gets its value at its first write (fills.filled),
// and is then pending from that write on, where the steps after the first
// register it.
void unregisterPending(PyObject* storage) {
  auto& list = gPending.storages;
  for (size_t i = list.size(); i-- > 0;) {
    if (list[i] != storage) continue;
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    setSlot(storage, gPy.storage.step, gPy.minusOne);
    Py_DECREF(storage);
    return;
  }
}

PyObject* unregisterPy(PyObject*, PyObject* storage) {
  unregisterPending(storage);
  Py_RETURN_NONE;
}

PyObject* registerPy(PyObject*, PyObject* storage) {
  try {
    registerPending(storage);
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  }
  Py_RETURN_NONE;
}

// The live pending storages, in order; the next epoch starts (mark_step).
PyObject* takePending(PyObject*, PyObject*) {
  releaseDropped();  // their storages may be dead to the program
  std::vector<PyObject*> storages;
  storages.swap(gPending.storages);
  PyObject* live = PyList_New(0);
  for (PyObject* s : storages) {
    if (live != nullptr && alive(s) && PyList_Append(live, s) != 0) Py_CLEAR(live);
    Py_DECREF(s);
  }
  Py_CLEAR(gPending.epoch);
  ++gPending.epochValue;
  return live;
}

PyObject* pendingCount(PyObject*, PyObject*) { return PyLong_FromSize_t(gPending.storages.size()); }

PyObject* untrack(PyObject*, PyObject* obj) {
  if (PyObject_IS_GC(obj)) PyObject_GC_UnTrack(obj);
  Py_RETURN_NONE;
}

PyMethodDef gMethods[] = {
    {"register_pending", registerPy, METH_O,
     "tensor._register: `storage` may hold an uncomputed value; mark_step() computes it."},
    {"unregister_pending", unregisterPy, METH_O,
     "Takes `storage` off the pending list; its next registration puts it last."},
    {"take_pending", takePending, METH_NOARGS, "The live pending storages, in order; a new epoch starts."},
    {"pending_count", pendingCount, METH_NOARGS, "How many storages are registered pending (live or not)."},
    {"untrack", untrack, METH_O,
     "Hides a trace object (Node, Storage, State) from the cyclic GC: the trace never forms a cycle."},
    {nullptr, nullptr, 0, nullptr}};

// tensor._fresh: a new tensor owning a new Storage (version 0, pending).
at::Tensor fresh(PyObject* node, PyObject* meta) {
  const auto& st = gPy.storage;
  py::object storage = newSlotted(
      gPy.storageType,
      {{st.base, node}, {st.version, gPy.zero}, {st.meta, meta}, {st.step, gPy.minusOne}, {st.prior, Py_None}});
  registerPending(storage.ptr());
  return newTensor(meta, storage.ptr(), gPy.emptyTuple, node, gPy.zero);
}

PyObject* recipesFor(PyObject* chain, PyObject* baseMeta) {
  std::vector<int64_t> key;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(chain); ++i)
    key.push_back(reinterpret_cast<int64_t>(PyTuple_GET_ITEM(chain, i)));
  key.push_back(reinterpret_cast<int64_t>(baseMeta));
  auto found = gRecipes.find(key);
  if (found != gRecipes.end()) return found->second.recipes.ptr();
  PyObject* made = PyObject_CallFunctionObjArgs(gPy.writeRecipes, chain, baseMeta, nullptr);
  if (made == nullptr) throw py::error_already_set();
  if (gRecipes.size() >= 4096) gRecipes.clear();  // views Python made anew each time
  Recipes r{py::reinterpret_steal<py::object>(made), {}};
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(chain); ++i)
    r.held.push_back(py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(chain, i)));
  r.held.push_back(py::reinterpret_borrow<py::object>(baseMeta));
  return gRecipes.emplace(std::move(key), std::move(r)).first->second.recipes.ptr();
}

// `items` with the markers replaced by `base` and `src`.
py::tuple substituted(PyObject* items, PyObject* base, PyObject* src) {
  py::tuple out(PyTuple_GET_SIZE(items));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); ++i) {
    PyObject* x = PyTuple_GET_ITEM(items, i);
    out[i] = py::reinterpret_borrow<py::object>(x == gPy.writeBase ? base : x == gPy.writeSrc ? src : x);
  }
  return hidden(out);
}

// tensor._write(t, node) for the tensor whose state is `self` (its recipes
// found already when it is a view).
void writeValue(PyObject* self, PyObject* node, PyObject* recipes) {
  PyObject* storage = slot(self, gPy.state.storage);
  PyObject* old = slot(storage, gPy.storage.base);
  if (slot(old, gPy.node.data) == Py_None && gPy.fills != nullptr) {
    int fill = PySet_Contains(gPy.fills, slot(old, gPy.node.op));
    if (fill < 0) throw py::error_already_set();
    if (fill) {
      PyObject* none = PyObject_CallOneArg(gPy.filled, storage);
      if (none == nullptr) throw py::error_already_set();
      Py_DECREF(none);
    }
  }
  if (slot(old, gPy.node.data) != Py_None) setSlot(storage, gPy.storage.prior, old);  // what a failed step gives back
  py::object base = py::reinterpret_borrow<py::object>(node);
  if (recipes != nullptr) {
    PyObject* views = PyTuple_GET_ITEM(recipes, 0);
    PyObject* scatters = PyTuple_GET_ITEM(recipes, 1);
    std::vector<py::object> values{py::reinterpret_borrow<py::object>(slot(storage, gPy.storage.base))};
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(views); ++i) {
      PyObject* step = PyTuple_GET_ITEM(views, i);
      values.push_back(viewNode(PyTuple_GET_ITEM(step, 0), step, values.back()));
    }
    // (op, args, kwargs, inputs, sig, meta) per step, the last step's first.
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(scatters); ++i) {
      PyObject* r = PyTuple_GET_ITEM(scatters, i);
      PyObject* under = values[values.size() - 1 - i].ptr();
      base = newNode(PyTuple_GET_ITEM(r, 0), substituted(PyTuple_GET_ITEM(r, 1), under, base.ptr()).ptr(),
                     PyTuple_GET_ITEM(r, 2), substituted(PyTuple_GET_ITEM(r, 3), under, base.ptr()).ptr(),
                     PyTuple_GET_ITEM(r, 4), PyTuple_GET_ITEM(r, 5));
    }
  }
  setSlot(storage, gPy.storage.base, base.ptr());
  py::object version = py::reinterpret_steal<py::object>(PyNumber_Add(slot(storage, gPy.storage.version), gPy.one));
  if (!version) throw py::error_already_set();
  setSlot(storage, gPy.storage.version, version.ptr());
  setSlot(self, gPy.state.value, node);
  setSlot(self, gPy.state.version, version.ptr());
  registerPending(storage);
}

// Whether `op` returns exactly `count` tensors (a multi-output answer).
bool returnsTensors(const c10::FunctionSchema& schema, Py_ssize_t count) {
  const auto& returns = schema.returns();
  if (static_cast<Py_ssize_t>(returns.size()) != count) return false;
  for (const auto& r : returns)
    if (r.real_type()->kind() != c10::TensorType::Kind) return false;
  return true;
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
  const CallShape shape = callShape(schema, arguments);

  // The arguments as tensor.dispatch would get them: positional ones, then
  // keyword-only ones that differ from their defaults.
  c10::SmallVector<Arg, 8> args;
  c10::SmallVector<size_t, 2> kwargs;  // indices into args
  std::vector<int64_t> key;
  key.reserve(2 + 2 * n);
  key.push_back(reinterpret_cast<int64_t>(&schema));
  for (size_t i = 0; i < n; ++i) {
    if (i >= shape.positional && i < shape.kwargStart) continue;
    if (i >= shape.kwargStart) {
      if (isDefault(formals[i], arguments[i])) continue;
      if (kind == kView || kind == kSplit) return false;
      key.push_back(7);
      key.push_back(static_cast<int64_t>(i));
      kwargs.push_back(args.size());
    }
    Arg& a = args.emplace_back();
    a.formal = &formals[i];
    if (!keyOf(arguments[i], lifted, a, key)) return false;
  }
  if (args.empty() || (kind != kFunctional && args[0].state == nullptr)) return false;
  PyObject* self = args[0].state;
  py::object recipes;  // a write through a view: how (held: Python code below may forget the tables)
  if ((kind == kInplace || kind == kCopy) && PyTuple_GET_SIZE(slot(self, gPy.state.chain)) != 0) {
    PyObject* storage = slot(self, gPy.state.storage);
    recipes = py::reinterpret_borrow<py::object>(
        recipesFor(slot(self, gPy.state.chain), slot(slot(storage, gPy.storage.base), gPy.node.meta)));
    if (recipes.is_none()) return false;
  }
  if (kind == kCopy) {
    // ops._copy_ of a lazy tensor of the same shape and dtype: its value is
    // written as it is.
    if (args.size() < 2 || args[1].state == nullptr) return false;
    const at::Tensor& to = THPVariable_Unpack(slot(self, gPy.state.meta));
    const at::Tensor& from = THPVariable_Unpack(slot(args[1].state, gPy.state.meta));
    if (to.sizes() != from.sizes() || to.scalar_type() != from.scalar_type()) return false;
    py::object value = valueOf(args[1].state);
    writeValue(self, value.ptr(), recipes ? recipes.ptr() : nullptr);
    return returns(stack, n, arguments[0].toTensor());  // self
  }

  auto found = gAnswers.find(key);
  if (found == gAnswers.end()) {
    // First time: ops.fast_meta infers (or finds) the output metadata.
    auto [pyArgs, pyKwargs] = toPythonCall(schema, arguments);
    PyObject* answer = PyObject_CallFunctionObjArgs(gPy.meta, opOverload(op), pyArgs.ptr(), pyKwargs.ptr(), nullptr);
    if (answer == nullptr) throw py::error_already_set();
    if (gAnswers.size() >= (1u << 16)) forget();  // constants that change every step (positions, lengths)
    found = gAnswers.emplace(std::move(key), Answer{answer}).first;
  }
  Answer& known = found->second;
  py::object answer = py::reinterpret_borrow<py::object>(known.meta);
  if (answer.is_none()) return false;

  if (kind == kView) {
    // ops._view: the node views self's value; the tensor shares self's
    // storage, its chain grows by the step.
    PyObject* step = answer.ptr();
    py::object node = viewNode(recorded.ptr(), step, valueOf(self));
    PyObject* storage = slot(self, gPy.state.storage);
    PyObject* chain = slot(self, gPy.state.chain);
    py::tuple longer(PyTuple_GET_SIZE(chain) + 1);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(chain); ++i)
      longer[i] = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(chain, i));
    longer[PyTuple_GET_SIZE(chain)] = py::reinterpret_borrow<py::object>(step);
    return returns(stack, n,
                   newTensor(PyTuple_GET_ITEM(step, gPy.step.meta), storage, hidden(longer).ptr(), node.ptr(),
                             slot(storage, gPy.storage.version)));
  }

  if (kind == kSplit) {
    // ops._split: pieces viewing slices of self (a tuple of ViewSteps),
    // each sharing self's storage, its chain one step longer.
    PyObject* steps = answer.ptr();
    PyObject* storage = slot(self, gPy.state.storage);
    PyObject* chain = slot(self, gPy.state.chain);
    const Py_ssize_t depth = PyTuple_GET_SIZE(chain);
    py::object value = valueOf(self);
    c10::List<at::Tensor> pieces;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(steps); ++i) {
      PyObject* step = PyTuple_GET_ITEM(steps, i);
      py::object node = viewNode(PyTuple_GET_ITEM(step, 0), step, value);
      py::tuple longer(depth + 1);
      for (Py_ssize_t j = 0; j < depth; ++j) longer[j] = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(chain, j));
      longer[depth] = py::reinterpret_borrow<py::object>(step);
      pieces.push_back(newTensor(PyTuple_GET_ITEM(step, gPy.step.meta), storage, hidden(longer).ptr(), node.ptr(),
                                 slot(storage, gPy.storage.version)));
    }
    torch::jit::drop(*stack, n);
    torch::jit::push(stack, std::move(pieces));
    return true;
  }

  // ops._functional and ops._inplace: the node applies the (functional) op.
  PyObject* meta = answer.ptr();
  if (PyTuple_Check(meta) && (kind != kFunctional || !returnsTensors(schema, PyTuple_GET_SIZE(meta)))) return false;
  const size_t nPositional = args.size() - kwargs.size();
  size_t tensors = 0;
  std::vector<int64_t> bits;  // lifted floats: the signature spells them, the key does not
  for (const auto& a : args) {
    tensors += (a.state != nullptr) +
               std::count_if(a.states.begin(), a.states.end(), [](PyObject* st) { return st != nullptr; });
    if (lifted && a.state == nullptr && !a.isEnum && a.value.isDouble()) {
      double d = a.value.toDouble();
      std::memcpy(&bits.emplace_back(), &d, sizeof d);
    }
  }
  // The signature of the last node from this key when it froze the same
  // constants (a chain of `x * c`, an optimizer's per-parameter ops).
  const bool sigKnown = known.sig != nullptr && known.bits == bits;
  py::object sig = py::reinterpret_borrow<py::object>(sigKnown ? known.sig : Py_None);
  const size_t forgotten = gForgotten;
  py::tuple nodeArgs(nPositional), frozen(sigKnown ? 0 : nPositional), inputs(tensors);
  py::dict nodeKwargs;
  py::tuple frozenKwargs(sigKnown ? 0 : kwargs.size());
  size_t input = 0, k = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    py::object v, fz;
    if (a.state != nullptr) {
      v = valueOf(a.state);
      inputs[input++] = v;
      fz = py::reinterpret_borrow<py::object>(gPy.blank);
    } else if (a.list) {  // as meta._convert: a list of values, a tuple of blanks
      py::list values(a.states.size());
      py::tuple blanks(sigKnown ? 0 : a.states.size());
      for (size_t j = 0; j < a.states.size(); ++j) {
        if (a.states[j] == nullptr) {  // an index list's None: freeze(None) is None
          values[j] = py::none();
          if (!sigKnown) blanks[j] = py::none();
          continue;
        }
        values[j] = valueOf(a.states[j]);
        inputs[input++] = values[j];
        if (!sigKnown) blanks[j] = py::reinterpret_borrow<py::object>(gPy.blank);
      }
      v = hidden(values);
      fz = hidden(blanks);
    } else if (a.isDevice) {
      v = py::reinterpret_borrow<py::object>(gPy.cpu);
      fz = v;
    } else if (a.isEnum) {
      v = toPython(*a.formal, a.value);  // torch.float16, torch.channels_last: freeze() keeps them as they are
      fz = v;
    } else {
      std::tie(v, fz) = constant(a.value, !sigKnown);
    }
    if (k < kwargs.size() && kwargs[k] == i) {
      py::str argName(a.formal->name());
      nodeKwargs[argName] = v;
      if (!sigKnown) frozenKwargs[k] = hidden(py::make_tuple(argName, fz));
      ++k;
    } else {
      nodeArgs[i] = v;
      if (!sigKnown) frozen[i] = fz;
    }
  }
  if (!sigKnown) {
    sig = hidden(py::make_tuple(name, hidden(frozen), hidden(frozenKwargs)));
    if (forgotten == gForgotten) {  // else `known` is gone
      Py_XSETREF(known.sig, sig.inc_ref().ptr());
      known.bits = std::move(bits);
    }
  }
  // Nodes never change their kwargs: those without any share one empty dict.
  PyObject* kw = kwargs.empty() ? gPy.emptyDict : hidden(nodeKwargs).ptr();
  py::object node = newNode(recorded.ptr(), hidden(nodeArgs).ptr(), kw, hidden(inputs).ptr(), sig.ptr(), meta);

  if (kind == kInplace) {
    writeValue(self, node.ptr(), recipes ? recipes.ptr() : nullptr);
    return returns(stack, n, arguments[0].toTensor());  // in-place: self
  }

  if (!PyTuple_Check(meta)) return returns(stack, n, fresh(node.ptr(), meta));
  torch::jit::drop(*stack, n);
  // Several outputs (ops._wrap_outputs): output i is getitem(node, i); an
  // output without metadata (masked out) is undefined.
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(meta); ++i) {
    PyObject* m = PyTuple_GET_ITEM(meta, i);
    if (m == Py_None) {
      torch::jit::push(stack, at::Tensor());
      continue;
    }
    py::object index = py::int_(i);
    py::object item =
        newNode(gPy.getitem, hidden(py::make_tuple(node, index)).ptr(), gPy.emptyDict,
                hidden(py::make_tuple(node)).ptr(), hidden(py::make_tuple(py::handle(gPy.getitem), index)).ptr(), m);
    torch::jit::push(stack, fresh(item.ptr(), m));
  }
  return true;
}

namespace {

void install(py::object nodeType, py::object storageType, py::object stateType, py::object stateValue, py::object info,
             py::object meta, py::object blank, py::object writeRecipes, py::object writeBase, py::object writeSrc) {
  gPy.node = {slotOffset(nodeType, "op"),     slotOffset(nodeType, "args"), slotOffset(nodeType, "kwargs"),
              slotOffset(nodeType, "inputs"), slotOffset(nodeType, "sig"),  slotOffset(nodeType, "meta"),
              slotOffset(nodeType, "data"),   slotOffset(nodeType, "job"),  slotOffset(nodeType, "kernels")};
  gPy.state = {slotOffset(stateType, "meta"), slotOffset(stateType, "storage"), slotOffset(stateType, "chain"),
               slotOffset(stateType, "value"), slotOffset(stateType, "version")};
  gPy.storage = {slotOffset(storageType, "base"), slotOffset(storageType, "version"), slotOffset(storageType, "meta"),
                 slotOffset(storageType, "step"), slotOffset(storageType, "prior")};
  gPy.nodeType = reinterpret_cast<PyTypeObject*>(nodeType.release().ptr());
  gPy.stateType = reinterpret_cast<PyTypeObject*>(stateType.release().ptr());
  gPy.storageType = reinterpret_cast<PyTypeObject*>(storageType.release().ptr());
  gPy.stateValue = stateValue.release().ptr();
  gPy.meta = meta.release().ptr();
  gPy.blank = blank.release().ptr();
  gPy.writeRecipes = writeRecipes.release().ptr();
  gPy.writeBase = writeBase.release().ptr();
  gPy.writeSrc = writeSrc.release().ptr();
  gPy.f = py::str("f").release().ptr();
  gPy.b = py::str("b").release().ptr();
  gPy.zero = py::int_(0).release().ptr();
  gPy.one = py::int_(1).release().ptr();
  gPy.minusOne = py::int_(-1).release().ptr();
  gPy.emptyTuple = py::tuple().release().ptr();
  gPy.emptyDict = py::dict().release().ptr();
  gPy.cpu = py::module_::import("torch").attr("device")("cpu").release().ptr();
  gPy.getitem = py::object(py::module_::import("operator").attr("getitem")).release().ptr();
  gPy.info = info.release().ptr();  // last: it turns the fast path on
}

}  // namespace

// fills.FILLS and fills.filled, for writeValue.
void installFills(py::frozenset fills, py::object filled) {
  gPy.filled = filled.release().ptr();
  gPy.fills = fills.release().ptr();
}

void defineFastPath(py::module_& m) {
  m.def("install_fast", &install, py::arg("node_type"), py::arg("storage_type"), py::arg("state_type"),
        py::arg("state_value"), py::arg("fast_info"), py::arg("fast_meta"), py::arg("blank"), py::arg("write_recipes"),
        py::arg("write_base"), py::arg("write_src"));
  for (PyMethodDef* def = gMethods; def->ml_name != nullptr; ++def)
    m.add_object(def->ml_name, py::reinterpret_steal<py::object>(PyCFunction_New(def, nullptr)));
  m.def("install_fills", &installFills, py::arg("fills"), py::arg("filled"),
        "The ops whose storage gets its value at its first write, and the function that computes it.");
  m.def("forget_fast", &forget, "The fast path asks Python again about every op (ops.forget_handler).");
}

}  // namespace lazymlir::device
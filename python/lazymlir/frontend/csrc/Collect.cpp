// ir.collect in C++ (see lazymlir/trace/ir.py): the graph a barrier needs, walked
// back from its outputs to device data in a deterministic order, and its
// cache key (one entry per node), without a Python frame per node.
//
// A step that records what an earlier one did builds no Python object per
// node for its key: the walk writes a fingerprint (words: per leaf its
// sizes, strides and dtype, per op node its signature and input positions,
// then the outputs and the options), and a fingerprint seen before gives the
// key, the leaves' and outputs' permutations built then. Signatures enter a
// fingerprint by identity, as the one canonical object of their value
// (interned); a fingerprint holds its canonical objects, so an address in it
// is never another object's while the fingerprint exists.

#include "Collect.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <unordered_map>
#include <vector>

namespace lazymlir::device {

namespace {

struct Collect {
  PyObject* graphType = nullptr;  // ir.Graph
  PyObject* densePerm = nullptr;  // ir.dense_perm(shape, stride)
  PyObject* lifting = nullptr;    // ir._lifting(node)
  PyObject* lift = nullptr;       // ir._LIFT: the ops whose floats may be lifted
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

// None for a contiguous layout, else ir.dense_perm of it.
py::object permOf(const at::Tensor& t) {
  if (t.is_contiguous()) return py::none();
  return call(gCollect.densePerm, {sizeOf(t), py::cast(t.strides().vec())});
}

// Interned signatures: value -> the canonical object; canonical objects by
// address (those need no lookup by value).
struct Canon {
  py::dict byValue;
  std::unordered_map<PyObject*, PyObject*> byAddress;
  // What ir._lifting answered, by (canonical signature, output dtype).
  struct Lift {
    py::object positions, values, dtype;  // None: nothing lifted
    PyObject* sig = nullptr;              // canonical lifted signature
  };
  std::unordered_map<std::pair<PyObject*, int>, Lift, c10::hash<std::pair<PyObject*, int>>> lifts;
  struct Seen {
    py::object key, inputPerms, outputPerms;
    std::vector<py::object> held;    // the canonical objects its words name
    std::shared_ptr<Replay> replay;  // how the replay runs this step's graph (Replay.cpp)
  };
  std::unordered_map<std::vector<int64_t>, Seen, WordsHash> seen;
  Seen* last = nullptr;  // the Seen of the last collect(), for arm_replay
};
Canon& gCanon = *new Canon;  // never destroyed: it holds Python objects past the interpreter's end

constexpr size_t kMaxCanonical = 1 << 16, kMaxSeen = 1 << 10;

void forgetCanonical() {
  gCanon.last = nullptr;
  gCanon.seen.clear();
  gCanon.lifts.clear();
  gCanon.byAddress.clear();
  gCanon.byValue.clear();
}

// The canonical object of a signature (borrowed: gCanon holds it).
PyObject* canonical(PyObject* sig) {
  auto found = gCanon.byAddress.find(sig);
  if (found != gCanon.byAddress.end()) return found->second;
  PyObject* c = PyDict_SetDefault(gCanon.byValue.ptr(), sig, sig);
  if (c == nullptr) throw py::error_already_set();
  if (c == sig) gCanon.byAddress.emplace(sig, sig);  // the dict holds it
  return c;
}

int dtypeCode(PyObject* meta) {
  return THPVariable_Check(meta) ? static_cast<int>(THPVariable_Unpack(meta).scalar_type()) : 63;
}

const Canon::Lift& liftOf(PyObject* n, PyObject* sig) {
  // By the result's dtype and the first input's (comparisons lift for int64 inputs).
  PyObject* ins = slot(n, gPy.node.inputs);
  int dtype = dtypeCode(slot(n, gPy.node.meta)) * 64 +
              (PyTuple_GET_SIZE(ins) ? dtypeCode(slot(PyTuple_GET_ITEM(ins, 0), gPy.node.meta)) : 63);
  auto found = gCanon.lifts.find({sig, dtype});
  if (found != gCanon.lifts.end()) return found->second;
  Canon::Lift lift{py::none(), py::none(), py::none()};
  py::object answer = call(gCollect.lifting, {n});
  if (!answer.is_none()) {  // (positions, values, lifted signature, dtype)
    lift.positions = answer[py::int_(0)];
    lift.values = answer[py::int_(1)];
    lift.sig = canonical(py::object(answer[py::int_(2)]).ptr());
    lift.dtype = answer[py::int_(3)];
  }
  return gCanon.lifts.emplace(std::make_pair(sig, dtype), std::move(lift)).first->second;
}

void pushTensorWords(std::vector<int64_t>& words, const at::Tensor& t) {
  words.push_back(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) words.push_back(t.size(i));
  for (int64_t i = 0; i < t.dim(); ++i) words.push_back(t.stride(i));
  words.push_back(static_cast<int64_t>(t.scalar_type()));
}

}  // namespace

// The walk both collect() and the replay of a step make: from the outputs
// back to device data, in key order, writing the fingerprint.
void walkGraph(Walk& w, PyObject* const* outputs, size_t count, PyObject* options) {
  TORCH_CHECK(gCollect.graphType != nullptr, "lazymlir: the tracer is not installed (import lazymlir)");
  // Bounded (signatures of constants that change every step), and never
  // while a walk borrows the canonical objects.
  if (static_cast<size_t>(PyDict_GET_SIZE(gCanon.byValue.ptr())) >= kMaxCanonical) forgetCanonical();
  std::vector<PyObject*> stack;
  for (size_t o = 0; o < count; ++o) {
    if (w.index.count(outputs[o])) continue;
    stack.push_back(outputs[o]);
    while (!stack.empty()) {
      PyObject* n = stack.back();
      if (w.index.count(n)) {
        stack.pop_back();
        continue;
      }
      PyObject* data = slot(n, gPy.node.data);
      if (data != Py_None) {  // device data: a graph input
        w.index[n] = static_cast<Py_ssize_t>(w.order.size());
        w.order.push_back(n);
        w.words.push_back(-1);
        pushTensorWords(w.words, THPVariable_Unpack(data));
        w.inputs.push_back(n);
        stack.pop_back();
        continue;
      }
      PyObject* ins = slot(n, gPy.node.inputs);
      const size_t before = stack.size();
      for (Py_ssize_t i = PyTuple_GET_SIZE(ins) - 1; i >= 0; --i)
        if (!w.index.count(PyTuple_GET_ITEM(ins, i))) stack.push_back(PyTuple_GET_ITEM(ins, i));
      if (stack.size() != before) continue;  // its inputs first, the first one on top
      stack.pop_back();
      w.index[n] = static_cast<Py_ssize_t>(w.order.size());
      w.order.push_back(n);
      PyObject* sig = canonical(slot(n, gPy.node.sig));
      int lift = PyDict_Contains(gCollect.lift, PyTuple_GET_ITEM(sig, 0));
      if (lift < 0) throw py::error_already_set();
      if (lift) {
        const Canon::Lift& found = liftOf(n, sig);
        if (!found.positions.is_none()) {
          w.lifts.push_back({n, w.scalars.size(), found.positions.ptr()});
          for (py::handle v : py::reinterpret_borrow<py::tuple>(found.values))
            w.scalars.push_back({v.ptr(), found.dtype.ptr()});
          sig = found.sig;
        }
      }
      w.sigs.push_back(sig);
      w.words.push_back(reinterpret_cast<int64_t>(sig));
      w.words.push_back(PyTuple_GET_SIZE(ins));
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ins); ++i) w.words.push_back(w.index[PyTuple_GET_ITEM(ins, i)]);
      w.nodes.push_back(n);
    }
  }
  w.words.push_back(-2);
  for (size_t o = 0; o < count; ++o) w.words.push_back(w.index[outputs[o]]);
  PyObject* opts = canonical(options);
  w.options = opts;
  w.words.push_back(reinterpret_cast<int64_t>(opts));
}

std::shared_ptr<Replay>* seenReplay(const std::vector<int64_t>& words) {
  auto seen = gCanon.seen.find(words);
  return seen == gCanon.seen.end() ? nullptr : &seen->second.replay;
}

std::shared_ptr<Replay>* lastReplaySlot(PyObject* key, py::object* outputPerms) {
  Canon::Seen* seen = gCanon.last;
  if (seen == nullptr || seen->key.ptr() != key) return nullptr;
  *outputPerms = seen->outputPerms;
  return &seen->replay;
}

void forgetReplays() {
  for (auto& [words, seen] : gCanon.seen) seen.replay.reset();
}

namespace {

py::object collect(py::sequence outputs, py::object options, bool full) {
  std::vector<PyObject*> outPtrs;
  outPtrs.reserve(outputs.size());
  for (py::handle out : outputs) outPtrs.push_back(out.ptr());
  Walk w;
  walkGraph(w, outPtrs.data(), outPtrs.size(), options.ptr());
  gCanon.last = nullptr;
  py::list inputs(w.inputs.size()), nodes(w.nodes.size()), scalars(w.scalars.size());
  for (size_t i = 0; i < w.inputs.size(); ++i) inputs[i] = py::handle(w.inputs[i]);
  for (size_t i = 0; i < w.nodes.size(); ++i) nodes[i] = py::handle(w.nodes[i]);
  for (size_t i = 0; i < w.scalars.size(); ++i)
    scalars[i] = py::make_tuple(py::handle(w.scalars[i].first), py::handle(w.scalars[i].second));
  py::list outs(outPtrs.size());
  py::tuple outIndex(outPtrs.size());
  for (size_t i = 0; i < outPtrs.size(); ++i) {
    outs[i] = py::handle(outPtrs[i]);
    outIndex[i] = py::int_(w.index[outPtrs[i]]);
  }

  auto graph = [&](py::object key, py::object lifted, py::object inputPerms, py::object outputPerms) {
    return call(gCollect.graphType, {key, inputs, nodes, outs, scalars, lifted, inputPerms, outputPerms});
  };
  auto seen = gCanon.seen.find(w.words);
  if (seen != gCanon.seen.end() && !full) {  // lifted None: collect(full=True) gives it
    gCanon.last = &seen->second;
    return graph(seen->second.key, py::none(), py::list(seen->second.inputPerms), py::list(seen->second.outputPerms));
  }

  // First time (or asked for in full): the key, entry by entry.
  py::list entries, inputPerms, outputPerms(outPtrs.size());
  size_t op = 0;
  for (PyObject* n : w.order) {
    PyObject* data = slot(n, gPy.node.data);
    if (data != Py_None) {
      const at::Tensor& d = THPVariable_Unpack(data);
      py::object perm = permOf(d);
      if (perm.is_none())
        entries.append(py::make_tuple(sizeOf(d), dtypeOf(d)));
      else
        entries.append(py::make_tuple(sizeOf(d), dtypeOf(d), perm));
      inputPerms.append(perm);
      continue;
    }
    PyObject* ins = slot(n, gPy.node.inputs);
    py::tuple at(PyTuple_GET_SIZE(ins));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ins); ++i) at[i] = py::int_(w.index[PyTuple_GET_ITEM(ins, i)]);
    entries.append(py::make_tuple(py::handle(w.sigs[op++]), at));
  }
  for (size_t i = 0; i < outPtrs.size(); ++i)
    outputPerms[i] = permOf(THPVariable_Unpack(slot(outPtrs[i], gPy.node.meta)));
  py::tuple key = py::make_tuple(py::tuple(entries), outIndex, py::tuple(outputPerms), options);
  if (seen == gCanon.seen.end()) {
    if (gCanon.seen.size() >= kMaxSeen) gCanon.seen.clear();  // gCanon.last is reset above
    Canon::Seen entry{key, py::tuple(inputPerms), py::tuple(outputPerms), {}, nullptr};
    entry.held.reserve(w.sigs.size() + 1);
    for (PyObject* s : w.sigs) entry.held.push_back(py::reinterpret_borrow<py::object>(s));
    entry.held.push_back(py::reinterpret_borrow<py::object>(w.options));
    gCanon.last = &gCanon.seen.emplace(std::move(w.words), std::move(entry)).first->second;
  }
  py::dict lifted;
  for (const Walk::Lifted& l : w.lifts)
    lifted[py::handle(l.node)] = py::make_tuple(py::int_(l.first), py::handle(l.positions));
  return graph(key, lifted, inputPerms, outputPerms);
}

void installCollect(py::object graphType, py::object densePerm, py::object lifting, py::object lift) {
  gCollect.densePerm = densePerm.release().ptr();
  gCollect.lifting = lifting.release().ptr();
  gCollect.lift = lift.release().ptr();
  gCollect.graphType = graphType.release().ptr();
}

}  // namespace

void defineCollect(py::module_& m) {
  m.def("install_collect", &installCollect, py::arg("graph_type"), py::arg("dense_perm"), py::arg("lifting"),
        py::arg("lift"));
  m.def("collect", &collect, py::arg("outputs"), py::arg("options") = py::tuple(), py::arg("full") = false,
        "ir.collect: the Graph that computes the nodes `outputs`, with its cache key.");
}

}  // namespace lazymlir::device

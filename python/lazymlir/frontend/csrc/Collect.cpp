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

#include "PySlots.h"

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
    std::vector<py::object> held;  // the canonical objects its words name
  };
  std::unordered_map<std::vector<int64_t>, Seen, WordsHash> seen;
};
Canon& gCanon = *new Canon;  // never destroyed: it holds Python objects past the interpreter's end

constexpr size_t kMaxCanonical = 1 << 16, kMaxSeen = 1 << 10;

void forgetCanonical() {
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

py::object collect(py::sequence outputs, py::object options, bool full) {
  TORCH_CHECK(gCollect.graphType != nullptr, "lazymlir: the tracer is not installed (import lazymlir)");
  // Bounded (signatures of constants that change every step), and never
  // while a walk borrows the canonical objects.
  if (static_cast<size_t>(PyDict_GET_SIZE(gCanon.byValue.ptr())) >= kMaxCanonical) forgetCanonical();
  std::unordered_map<PyObject*, Py_ssize_t> index;
  std::vector<PyObject*> order;  // every node, in key order
  std::vector<PyObject*> sigs;   // per op node in order: its canonical (lifted) signature
  std::vector<int64_t> words;
  py::list inputs, nodes, scalars;
  struct Lifted {
    PyObject* node;
    size_t first;
    PyObject* positions;
  };
  std::vector<Lifted> lifts;  // Graph.lifted, built when the key is
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
        index[n] = static_cast<Py_ssize_t>(order.size());
        order.push_back(n);
        words.push_back(-1);
        pushTensorWords(words, THPVariable_Unpack(data));
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
      index[n] = static_cast<Py_ssize_t>(order.size());
      order.push_back(n);
      PyObject* sig = canonical(slot(n, gPy.node.sig));
      int lift = PyDict_Contains(gCollect.lift, PyTuple_GET_ITEM(sig, 0));
      if (lift < 0) throw py::error_already_set();
      if (lift) {
        const Canon::Lift& found = liftOf(n, sig);
        if (!found.positions.is_none()) {
          lifts.push_back({n, static_cast<size_t>(scalars.size()), found.positions.ptr()});
          for (py::handle v : py::reinterpret_borrow<py::tuple>(found.values))
            scalars.append(py::make_tuple(v, found.dtype));
          sig = found.sig;
        }
      }
      sigs.push_back(sig);
      words.push_back(reinterpret_cast<int64_t>(sig));
      words.push_back(PyTuple_GET_SIZE(ins));
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ins); ++i) words.push_back(index[PyTuple_GET_ITEM(ins, i)]);
      nodes.append(n);
    }
  }
  py::list outs(outputs.size());
  py::tuple outIndex(outputs.size());
  words.push_back(-2);
  for (size_t i = 0; i < outputs.size(); ++i) {
    py::object o = outputs[i];
    outs[i] = o;
    outIndex[i] = py::int_(index[o.ptr()]);
    words.push_back(index[o.ptr()]);
  }
  PyObject* opts = canonical(options.ptr());
  words.push_back(reinterpret_cast<int64_t>(opts));

  auto graph = [&](py::object key, py::object lifted, py::object inputPerms, py::object outputPerms) {
    return call(gCollect.graphType, {key, inputs, nodes, outs, scalars, lifted, inputPerms, outputPerms});
  };
  auto seen = gCanon.seen.find(words);
  if (seen != gCanon.seen.end() && !full)  // lifted None: collect(full=True) gives it
    return graph(seen->second.key, py::none(), py::list(seen->second.inputPerms), py::list(seen->second.outputPerms));

  // First time (or asked for in full): the key, entry by entry.
  py::list entries, inputPerms, outputPerms(outputs.size());
  size_t op = 0;
  for (PyObject* n : order) {
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
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ins); ++i) at[i] = py::int_(index[PyTuple_GET_ITEM(ins, i)]);
    entries.append(py::make_tuple(py::handle(sigs[op++]), at));
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    outputPerms[i] = permOf(THPVariable_Unpack(slot(py::object(outputs[i]).ptr(), gPy.node.meta)));
  py::tuple key = py::make_tuple(py::tuple(entries), outIndex, py::tuple(outputPerms), options);
  if (seen == gCanon.seen.end()) {
    if (gCanon.seen.size() >= kMaxSeen) gCanon.seen.clear();
    Canon::Seen entry{key, py::tuple(inputPerms), py::tuple(outputPerms), {}};
    entry.held.reserve(sigs.size() + 1);
    for (PyObject* s : sigs) entry.held.push_back(py::reinterpret_borrow<py::object>(s));
    entry.held.push_back(py::reinterpret_borrow<py::object>(opts));
    gCanon.seen.emplace(std::move(words), std::move(entry));
  }
  py::dict lifted;
  for (const Lifted& l : lifts) lifted[py::handle(l.node)] = py::make_tuple(py::int_(l.first), py::handle(l.positions));
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

// trace.collect in C++ (see trace.py): the graph a barrier needs, walked
// back from its outputs to device data in a deterministic order, and its
// cache key (one entry per node), without a Python frame per node.

#include "PySlots.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <unordered_map>
#include <vector>

namespace lazymlir::device {

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

}  // namespace

void defineCollect(py::module_& m) {
  m.def("install_collect", &installCollect, py::arg("graph_type"), py::arg("dense_perm"), py::arg("lifting"),
        py::arg("lift"));
  m.def("collect", &collect, py::arg("outputs"), py::arg("options") = py::tuple(),
        "trace.collect: the Graph that computes the nodes `outputs`, with its cache key.");
}

}  // namespace lazymlir::device

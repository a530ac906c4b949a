// The replay: a step whose graph was compiled and run before, run from here
// without Python (lazymlir.execution.run.replay says when it may be used).
//
// A barrier's Python path (collect, the cache lookup, the output buffers, the
// job, the outputs' new values) costs 50-80 us with the caches cold, as they
// are after a kernel that streams more memory than the last-level cache
// holds: layer norm of 4096x1024 floats paid ~100 us a step on top of its
// 0.6-0.7 ms kernel, against eager's ~25 us. The replay makes the same walk
// as collect(), finds the fingerprint's record (armed by the Python path
// after a run of the same graph: a static compiled graph), allocates the
// outputs, calls the compiled entry
// through the native runtime's C function (handed over by address: this
// module knows nothing of MLIR) and gives the outputs their values, as
// run.execute and Node.set_data do. Anything it does not cover (a graph not
// armed, an input still being computed, a failed run, which is rerun by the
// Python path to raise the right error) returns None before any node got
// a value, and the Python path does the step.

#include "Collect.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#include <atomic>
#include <optional>
#include <unordered_set>

namespace lazymlir::device {

at::Tensor outputBuffer(c10::IntArrayRef shape, at::ScalarType dtype);  // PooledBuffers.cpp

// How to run one compiled graph (what run.execute would do on a cache hit).
struct Replay {
  py::object holder;  // keeps the executable alive (its Python object)
  const void* executable = nullptr;
  std::vector<std::vector<int64_t>> outSizes;  // each output's buffer (contiguous)
  std::vector<at::ScalarType> outTypes;
  // Per output, empty, or the permutation that views its buffer in the
  // output's memory format (a channels_last result: ir.Graph.output_values).
  std::vector<std::vector<int64_t>> outViews;
  py::object kernels;  // its kernel count (Node.kernels of the outputs)
  // One executable never runs on two threads at once (its runtime-check
  // flag is per graph): a second thread's replay leaves it to the Python path.
  std::atomic<bool> running{false};
};

namespace {

// int run(executable, inputs, input bytes, count, outputs, output bytes,
// count): 0 when it ran, else nonzero (a runtime check failed, a count or
// size differed, ...). lazymlir._native.raw_run_function().
using RunRaw = int (*)(const void*, void* const*, const size_t*, size_t, void* const*, const size_t*, size_t);
RunRaw gRun = nullptr;

struct {
  Py_ssize_t finished = -1, error = -1;  // run._Job's slots
} gJob;

void installReplay(py::object jobType) {
  gJob.finished = slotOffset(jobType, "_finished");
  gJob.error = slotOffset(jobType, "_error");
}

void setRunFunction(uintptr_t run) { gRun = reinterpret_cast<RunRaw>(run); }

// run.execute's hit path for `key`'s graph, the one collect() just returned:
// from now on the replay runs it (lastReplaySlot says whether it can).
bool armReplay(py::object key, py::object holder, uintptr_t executable, py::sequence outSpecs, py::object kernels) {
  py::object outputPerms;
  std::shared_ptr<Replay>* slotted = lastReplaySlot(key.ptr(), &outputPerms);
  if (slotted == nullptr || py::len(outputPerms) != py::len(outSpecs)) return false;
  if (*slotted && (*slotted)->executable == reinterpret_cast<const void*>(executable)) return true;
  auto replay = std::make_shared<Replay>();
  replay->holder = holder;
  replay->executable = reinterpret_cast<const void*>(executable);
  replay->kernels = kernels;
  for (py::handle spec : outSpecs) {
    py::tuple pair = py::reinterpret_borrow<py::tuple>(spec);
    replay->outSizes.push_back(py::cast<std::vector<int64_t>>(pair[0]));
    PyObject* dtype = py::object(pair[1]).ptr();
    TORCH_CHECK(THPDtype_Check(dtype), "lazymlir: arm_replay: not a dtype");
    replay->outTypes.push_back(reinterpret_cast<THPDtype*>(dtype)->scalar_type);
  }
  for (py::handle perm : outputPerms) {
    std::vector<int64_t> inverse;
    if (!perm.is_none()) {
      auto order = py::cast<std::vector<int64_t>>(perm);
      inverse.resize(order.size());
      for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
    }
    replay->outViews.push_back(std::move(inverse));
  }
  *slotted = std::move(replay);
  return true;
}

// A lifted number as ir._scalar_tensor takes it; nullopt for anything else
// (the Python path converts it).
std::optional<c10::Scalar> scalarOf(PyObject* value) {
  if (PyBool_Check(value)) return c10::Scalar(value == Py_True);
  if (PyFloat_CheckExact(value)) return c10::Scalar(PyFloat_AS_DOUBLE(value));
  if (PyLong_CheckExact(value)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow == 0 && !(v == -1 && PyErr_Occurred())) return c10::Scalar(static_cast<int64_t>(v));
    PyErr_Clear();
  }
  return std::nullopt;
}

// The pending base values of `storages` (mark_step's, or a barrier's),
// computed by their armed graph, each given `job` (a finished run._Job, or
// None) as the job that computed it; the graph's kernel count, or None when
// the Python path must do it (no node has a new value then).
py::object replay(py::sequence storages, py::object options, py::object job) {
  if (gRun == nullptr || gJob.finished < 0) return py::none();
  std::vector<PyObject*> outputs;
  std::unordered_set<PyObject*> distinct;
  for (py::handle s : storages) {
    PyObject* base = slot(s.ptr(), gPy.storage.base);
    if (slot(base, gPy.node.data) == Py_None && distinct.insert(base).second) outputs.push_back(base);
  }
  if (outputs.empty()) return py::none();
  Walk w;
  walkGraph(w, outputs.data(), outputs.size(), options.ptr());
  std::shared_ptr<Replay>* found = seenReplay(w.words);
  if (found == nullptr || !*found) return py::none();
  std::shared_ptr<Replay> r = *found;  // alive through the run, whatever forgets it
  if (r->outSizes.size() != outputs.size()) return py::none();

  for (PyObject* n : w.inputs) {
    PyObject* job = slot(n, gPy.node.job);
    // An input another graph computes: only when that graph is known to
    // have finished well (the Python path waits, or raises its error).
    if (job != Py_None && (slot(job, gJob.finished) != Py_True || slot(job, gJob.error) != Py_None)) return py::none();
  }
  // The inputs' values, held through the run (which releases the GIL: the
  // trace may drop them meanwhile), then the lifted numbers as 0-dim tensors.
  // An input in another memory format (channels_last) is passed as its
  // memory is, as ir.Graph.input_values' permuted view of it would be: the
  // fingerprint holds its strides, so the layout is the one compiled for.
  std::vector<at::Tensor> held;
  held.reserve(w.inputs.size() + w.scalars.size());
  for (PyObject* n : w.inputs) held.push_back(THPVariable_Unpack(slot(n, gPy.node.data)));
  for (const auto& [value, dtype] : w.scalars) {
    std::optional<c10::Scalar> number = scalarOf(value);
    if (!number) return py::none();
    held.push_back(at::scalar_tensor(*number, reinterpret_cast<THPDtype*>(dtype)->scalar_type));
  }
  std::vector<void*> ptrs;
  std::vector<size_t> bytes;
  ptrs.reserve(held.size());
  bytes.reserve(held.size());
  for (const at::Tensor& t : held) {
    ptrs.push_back(t.data_ptr());
    bytes.push_back(t.nbytes());
  }
  for (PyObject* n : w.inputs)  // finished well: nothing to wait for (as run._unfinished_inputs)
    if (slot(n, gPy.node.job) != Py_None) setSlot(n, gPy.node.job, Py_None);
  std::vector<at::Tensor> outs;
  std::vector<void*> outPtrs;
  std::vector<size_t> outBytes;
  for (size_t i = 0; i < r->outSizes.size(); ++i) {
    outs.push_back(outputBuffer(r->outSizes[i], r->outTypes[i]));
    outPtrs.push_back(outs.back().data_ptr());
    outBytes.push_back(outs.back().nbytes());
  }
  if (r->running.exchange(true)) return py::none();
  int failed;
  {
    py::gil_scoped_release release;
    failed =
        gRun(r->executable, ptrs.data(), bytes.data(), ptrs.size(), outPtrs.data(), outBytes.data(), outPtrs.size());
  }
  r->running = false;
  if (failed) return py::none();  // the Python path runs it again, and raises what failed

  // Node.set_data(value, job, kernels), for each output (the caller's
  // storages hold them; the walk's other nodes may be gone by now).
  for (size_t i = 0; i < outputs.size(); ++i) {
    PyObject* n = outputs[i];
    if (!r->outViews[i].empty()) outs[i] = outs[i].permute(r->outViews[i]);
    py::object value = py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(outs[i])));
    if (!value) throw py::error_already_set();
    setSlot(n, gPy.node.data, value.ptr());
    setSlot(n, gPy.node.job, job.ptr());
    setSlot(n, gPy.node.kernels, r->kernels.ptr());
    setSlot(n, gPy.node.args, Py_None);
    setSlot(n, gPy.node.kwargs, Py_None);
    setSlot(n, gPy.node.sig, Py_None);
    setSlot(n, gPy.node.inputs, gPy.emptyTuple);
  }
  // The step cannot fail now: the values before it need not be kept (barriers._sync).
  for (py::handle s : storages)
    if (slot(s.ptr(), gPy.storage.prior) != Py_None) setSlot(s.ptr(), gPy.storage.prior, Py_None);
  return r->kernels;
}

}  // namespace

void defineReplay(py::module_& m) {
  m.def("install_replay", &installReplay, py::arg("job_type"), "run._Job, whose slots the replay reads.");
  m.def("set_run_function", &setRunFunction, py::arg("run"),
        "The native runtime's raw run function, by address (lazymlir._native.raw_run_function).");
  m.def("arm_replay", &armReplay, py::arg("key"), py::arg("holder"), py::arg("executable"), py::arg("out_specs"),
        py::arg("kernels"),
        "The graph the last collect() returned (its key) is compiled: `executable` (an address, kept alive by "
        "`holder`) computes it into buffers of `out_specs`. Whether the replay can run it.");
  m.def("replay", &replay, py::arg("storages"), py::arg("options"), py::arg("job"),
        "Compute the pending values of `storages` with their armed graph (`job`, finished, or None, becomes "
        "their job): its kernel count, or None when the Python path must.");
  m.def("forget_replays", &forgetReplays, "Drop every armed graph (the compiled graphs were forgotten).");
}

}  // namespace lazymlir::device

// What the fast path and ir.collect read and write in the tracer's Python
// objects (ir.Node, tensor.Storage, tensor.State): their __slots__, found
// once by offset (FastPath.cpp installs them).

#pragma once

#include "LazyTensor.h"

#include <structmember.h>  // PyMemberDef: where a __slots__ attribute lives

#include <vector>

namespace lazymlir::device {

// Where a __slots__ attribute of a Python class lives in its objects.
inline Py_ssize_t slotOffset(const py::object& type, const char* name) {
  py::object descr = type.attr(name);
  TORCH_CHECK(Py_IS_TYPE(descr.ptr(), &PyMemberDescr_Type), "lazymlir: ", name, " is not a slot");
  return reinterpret_cast<PyMemberDescrObject*>(descr.ptr())->d_member->offset;
}

inline PyObject*& slot(PyObject* obj, Py_ssize_t offset) {
  return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset);
}

// Stores a new reference to value in a slot, dropping what it held.
inline void setSlot(PyObject* obj, Py_ssize_t offset, PyObject* value) {
  Py_INCREF(value);
  PyObject* old = slot(obj, offset);
  slot(obj, offset) = value;
  Py_XDECREF(old);
}

// FNV-1a over a key of words (the fast path's keys, collect's fingerprints).
struct WordsHash {
  size_t operator()(const std::vector<int64_t>& words) const {
    size_t h = 0xcbf29ce484222325ull;
    for (int64_t v : words) h = (h ^ static_cast<size_t>(v)) * 0x100000001b3ull;
    return h;
  }
};

enum Kind : int { kFunctional = 0, kView = 1, kInplace = 2, kCopy = 3, kSplit = 4 };

struct Python {
  PyTypeObject* nodeType = nullptr;
  PyTypeObject* stateType = nullptr;
  PyTypeObject* storageType = nullptr;
  PyObject* stateValue = nullptr;    // tensor._state_value(state)
  PyObject* info = nullptr;          // ops.fast_info(func) -> (kind, name, lifted, recorded op) or None
  PyObject* meta = nullptr;          // ops.fast_meta(func, args, kwargs) -> meta / ViewStep or None
  PyObject* blank = nullptr;         // ir.BLANK
  PyObject* writeRecipes = nullptr;  // tensor._write_recipes(chain, base meta)
  PyObject* writeBase = nullptr;     // its markers
  PyObject* writeSrc = nullptr;
  PyObject* f = nullptr;  // "f", "b": ir.freeze()'s tags
  PyObject* b = nullptr;
  PyObject* zero = nullptr;
  PyObject* one = nullptr;
  PyObject* minusOne = nullptr;
  PyObject* emptyTuple = nullptr;
  PyObject* emptyDict = nullptr;
  PyObject* cpu = nullptr;      // torch.device("cpu"): a node's device argument (meta._convert)
  PyObject* getitem = nullptr;  // operator.getitem: a multi-output node's outputs
  PyObject* fills = nullptr;    // fills.FILLS: ops whose storage gets its value at its first write
  PyObject* filled = nullptr;   // fills.filled(storage)
  struct {
    Py_ssize_t op, args, kwargs, inputs, sig, meta, data, job, kernels;
  } node{};
  struct {
    Py_ssize_t meta, storage, chain, value, version;
  } state{};
  struct {
    Py_ssize_t base, version, meta, step, prior;
  } storage{};
  struct {
    Py_ssize_t rest, kwargs, meta, sig;  // ViewStep's fields (a NamedTuple: indices)
  } step{1, 2, 3, 4};
};
extern Python gPy;

}  // namespace lazymlir::device

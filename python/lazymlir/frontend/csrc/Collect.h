// What Collect.cpp (ir.collect) shares with Replay.cpp: the walk from a
// barrier's outputs back to device data that writes a graph's fingerprint,
// and the replay record a fingerprint seen before may carry.

#pragma once

#include "PySlots.h"

#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lazymlir::device {

// One walk: the nodes in key order and the fingerprint (see Collect.cpp).
// Every PyObject* is borrowed: from the trace, or from the canonical objects
// (which no walk forgets while another is under way).
struct Walk {
  struct Lifted {
    PyObject* node;
    size_t first;         // its first scalar in `scalars`
    PyObject* positions;  // where in its arguments they were
  };
  std::unordered_map<PyObject*, Py_ssize_t> index;       // node -> position in order
  std::vector<PyObject*> order;                          // every node, in key order
  std::vector<PyObject*> sigs;                           // per op node in order: its canonical (lifted) signature
  std::vector<PyObject*> inputs;                         // the leaves (device data), in placeholder order
  std::vector<PyObject*> nodes;                          // the op nodes, in topological order
  std::vector<std::pair<PyObject*, PyObject*>> scalars;  // lifted (value, torch dtype)
  std::vector<Lifted> lifts;
  std::vector<int64_t> words;   // the fingerprint
  PyObject* options = nullptr;  // canonical
};

void walkGraph(Walk& w, PyObject* const* outputs, size_t count, PyObject* options);

struct Replay;  // Replay.cpp

// The replay record slot of the graph whose fingerprint is `words`, or
// nullptr when that fingerprint was not seen (or was forgotten).
std::shared_ptr<Replay>* seenReplay(const std::vector<int64_t>& words);

// The replay record slot of the graph the last collect() returned, when its
// key is `key` (else nullptr), and its outputs' permutations (ir.Graph's
// output_perms: None, or the dimensions' order in memory, per output).
std::shared_ptr<Replay>* lastReplaySlot(PyObject* key, py::object* outputPerms);

// Drops every replay record (the compiled graphs were forgotten).
void forgetReplays();

}  // namespace lazymlir::device

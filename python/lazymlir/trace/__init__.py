"""The trace: what the lazy device records and hands to the compiler.

``ir``: the recorded nodes, a trace's graph and cache key, and its FX form;
``dynamic``: generalizing a trace's sizes into symbols (templates) so one
compiled graph serves many shapes. Torch only; nothing here imports MLIR."""

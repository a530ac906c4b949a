"""NVIDIA GPUs: ``aot`` compiles a step's graphs to a bundle of PTX and launch
plans here; ``launch`` loads and runs a bundle with torch and the CUDA driver
only (no MLIR, no native module: it runs on machines without them)."""

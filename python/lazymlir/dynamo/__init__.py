"""``torch.compile(backend="lazymlir")``: Dynamo's and AOTAutograd's FX graphs
through the same lowering, compiler and caches as the lazy device."""

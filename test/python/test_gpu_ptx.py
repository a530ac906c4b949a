"""The NVVM GPU target's compiler, on a machine without a GPU: graphs the
lazy device records go through lazymlir-gpu-pipeline (sm_90 and sm_80) and
ptxas assembles every kernel. ptxas and libdevice come from the
nvidia-cuda-nvcc / nvidia-nvvm wheels `make test` installs (or
LAZYMLIR_CUDA_PATH, or /usr/local/cuda): their absence is a failure, not a
skip."""

import glob
import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import lazymlir
from lazymlir import config, testing

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PTX_OF = os.path.join(REPO, "test", "Pipelines", "Inputs", "ptx_of.py")


def cuda_root():
    from lazymlir.execution import native

    root = native.cuda_toolkit()
    assert os.access(os.path.join(root, "bin", "ptxas"), os.X_OK), (
        f"no ptxas in {root}/bin: `make test` installs nvidia-cuda-nvcc into .venv"
    )
    return root


def lazymlir_opt():
    tool = shutil.which("lazymlir-opt", path=os.path.dirname(sys.executable)) or os.path.join(
        REPO, "build", "bin", "lazymlir-opt"
    )
    assert os.access(tool, os.X_OK), "lazymlir-opt is not built: run `make`"
    return tool


def ptx_kernels(fn, args, tmp_path, chip="sm_90"):
    """Records fn(*args) on the lazy device (a fresh compile, dumped), runs
    each dumped graph through lazymlir-gpu-pipeline for ``chip`` and
    assembles every kernel with ptxas; returns the kernels' PTX texts. The
    lazy device's results must equal eager's (the graphs are the real ones)."""
    lazymlir.cache.clear()
    dumps = tmp_path / "dumps"
    with config.patch(dump_dir=str(dumps)):
        out = fn(*[a.to("lazy") for a in args])
        lazymlir.mark_step()
    expected = fn(*args)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)
    root = cuda_root()
    libdevice = os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc")
    graphs = sorted(glob.glob(str(dumps / "*.linalg.mlir")))
    assert graphs, "nothing was compiled"
    texts = []
    for i, graph in enumerate(graphs):
        gpu = tmp_path / f"g{i}.gpu.mlir"
        done = subprocess.run(
            [lazymlir_opt(), graph, f"--lazymlir-gpu-pipeline=chip={chip} libdevice={libdevice}", "-o", str(gpu)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        host = [line for line in gpu.read_text().splitlines() if "gpu.binary" not in line]
        for op in ("memref.load", "memref.store", "scf.for", "scf.parallel", "cf.assert"):
            # The host only allocates, views, copies and launches.
            assert not any(op in line for line in host), f"{op} left on the host in {graph}"
        listed = subprocess.run(
            [sys.executable, PTX_OF, str(gpu), "--all", str(tmp_path / f"g{i}")],
            capture_output=True,
            text=True,
            check=True,
        )
        for ptx in listed.stdout.split():
            assembled = subprocess.run(
                [os.path.join(root, "bin", "ptxas"), f"-arch={chip}", ptx, "-o", ptx + ".cubin"],
                capture_output=True,
                text=True,
            )
            assert assembled.returncode == 0, f"{ptx}: {assembled.stderr}"
            text = open(ptx).read()
            assert ".extern" not in text, ptx  # libdevice linked, nothing unresolved
            texts.append(text)
    return texts


def chain10(x, y):
    return torch.sigmoid((((x * 2.0 + 1.0).relu() * y - 0.5).abs() + 1.0).sqrt() * 3.0)


def test_elementwise_chain_is_one_gpu_kernel(native_built, tmp_path):
    kernels = ptx_kernels(chain10, (torch.randn(4096), torch.randn(4096)), tmp_path)
    assert len(kernels) == 1
    assert "%tid.x" in kernels[0] and ".target sm_90" in kernels[0]


@pytest.mark.parametrize("chip", ["sm_90", "sm_80"])
def test_softmax_layer_norm_and_linear_assemble(native_built, tmp_path, chip):
    x = torch.randn(64, 256)
    w, b = torch.randn(128, 256), torch.randn(128)
    ptx_kernels(lambda t: torch.softmax(t, -1), (x,), tmp_path / "softmax", chip)
    ptx_kernels(lambda t: F.layer_norm(t, (256,)), (x,), tmp_path / "layer_norm", chip)
    ptx_kernels(lambda t, w, b: F.relu(F.linear(t, w, b)), (x, w, b), tmp_path / "linear", chip)


def test_mnist_training_step_assembles(native_built, tmp_path):
    torch.manual_seed(0)
    model = testing.MnistNet()
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))

    def loss(x, y):
        return F.nll_loss(model(x), y)

    lazy_model = testing.MnistNet()
    lazy_model.load_state_dict(model.state_dict())
    lazy_model = lazy_model.to("lazy")
    model.eval(), lazy_model.eval()  # dropout off: the same values (gradients still flow)

    def step(x, y):
        if x.device.type == "lazy":
            out = F.nll_loss(lazy_model(x), y)
            out.backward()
            return torch.stack([out] + [p.grad.sum() for p in lazy_model.parameters()])
        out = loss(x, y)
        out.backward()
        return torch.stack([out] + [p.grad.sum() for p in model.parameters()])

    kernels = ptx_kernels(step, (x, y), tmp_path)
    assert len(kernels) > 10


def test_bad_target_is_a_diagnostic_not_an_abort(native_built, tmp_path):
    graph = tmp_path / "g.mlir"
    graph.write_text("""
func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {
  %e = tensor.empty() : tensor<64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.exp %a : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}
""")
    for options, message in [
        ("chip=sm_90 features=+ptx60", "PTX 6.0 does not support sm_90"),
        ("chip=sm_30", "unsupported chip 'sm_30'"),
        ("chip=sm_90", "no libdevice is linked"),
    ]:
        done = subprocess.run(
            [lazymlir_opt(), str(graph), f"--lazymlir-gpu-pipeline={options}"], capture_output=True, text=True
        )
        assert done.returncode == 1 and message in done.stderr, (options, done.returncode, done.stderr[-2000:])


# Ops beyond elementwise and reductions: scatters, sorts and scans
# (TMTensor, one-thread kernels for now), gathers and indexing (checked
# indices: the flag global), integer division (checked divisors), pooling,
# convolution, float64 and bool outputs.
OPS = {
    "index_put": lambda x, i: x.index_put((i,), torch.ones(16, 32, device=x.device), accumulate=True),
    "scatter_add": lambda x, i: torch.zeros(64, 32, device=x.device).scatter_add(0, i[:, None].expand(16, 32), x[:16]),
    "sort": lambda x, i: torch.sort(x, dim=1)[0],
    "topk": lambda x, i: torch.topk(x, 5, dim=1)[0],
    "cumsum": lambda x, i: torch.cumsum(x, 1),
    "gather": lambda x, i: torch.gather(x, 0, i[:, None].expand(16, 32)),
    "argmax": lambda x, i: torch.argmax(x, 1),
    "max_pool": lambda x, i: F.max_pool2d(x.view(1, 1, 64, 32), 2),
    "conv": lambda x, i: F.conv2d(x.view(1, 1, 64, 32), torch.ones(4, 1, 3, 3, device=x.device)),
    "integer_division": lambda x, i: i // (i % 7 + 1) + torch.remainder(i, 5),
    "float64": lambda x, i: (x.double() * 2).sin(),
    "bool_result": lambda x, i: (x > 0) & (x < 0.5),
    "cross_entropy": lambda x, i: F.cross_entropy(x[:16], i % 32),
    "embedding": lambda x, i: F.embedding(i, x),
    "var_mean": lambda x, i: torch.var_mean(x, 0)[0],
    "logsumexp": lambda x, i: torch.logsumexp(x, 1),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_assembles(native_built, tmp_path, name):
    torch.manual_seed(0)
    x, i = torch.randn(64, 32), torch.randint(0, 64, (16,))
    assert ptx_kernels(OPS[name], (x, i), tmp_path)

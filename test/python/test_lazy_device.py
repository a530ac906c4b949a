"""The lazy device itself: moving tensors and modules, factories, metadata
without execution, barriers, printing, and the tutorial's control flow."""

import copy
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
from conftest import assert_compiled

import lazymlir
from lazymlir import metrics
from lazymlir.frontend.tensor import state


def add_two_maybe(t: torch.Tensor, maybe: torch.Tensor):
    if maybe:
        return t + 2
    return t


@pytest.mark.parametrize("maybe", [0, 1])
def test_tutorial_add_two_maybe(maybe):
    t = torch.ones(1)
    m = torch.BoolTensor([maybe])
    lazy_result = add_two_maybe(t.to("lazy"), m.to("lazy"))
    print(lazy_result)
    assert lazy_result.cpu() == add_two_maybe(t, m)


def test_to_and_back():
    x = torch.randn(3, 4)
    lx = x.to("lazy")
    assert isinstance(lx, lazymlir.LazyTensor)
    assert lx.device.type == "lazy"
    assert lx.device == lazymlir.device()
    back = lx.cpu()
    assert back.device.type == "cpu"
    torch.testing.assert_close(back, x)
    torch.testing.assert_close(lx.to("cpu"), x)
    # The lazy copy is a snapshot: writing to the source changes nothing.
    x.add_(1)
    torch.testing.assert_close(lx.cpu(), x - 1)


def test_factories():
    z = torch.zeros(2, 3, device="lazy")
    o = torch.ones(2, 3, device="lazy", dtype=torch.int64)
    f = torch.full((4,), 2.5, device="lazy")
    e = torch.empty(5, device="lazy")
    assert z.device.type == o.device.type == f.device.type == e.device.type == "lazy"
    assert e.shape == (5,)
    torch.testing.assert_close(z.cpu(), torch.zeros(2, 3))
    torch.testing.assert_close(o.cpu(), torch.ones(2, 3, dtype=torch.int64))
    torch.testing.assert_close(f.cpu(), torch.full((4,), 2.5))
    torch.manual_seed(3)
    r = torch.randn(3, 3, device="lazy")
    torch.manual_seed(3)
    torch.testing.assert_close(r.cpu(), torch.randn(3, 3))


def test_metadata_without_execution():
    x = torch.randn(4, 6).to("lazy")
    lazymlir.mark_step()
    metrics.reset()
    y = x.t()
    assert y.shape == (6, 4) and y.stride() == (1, 6) and not y.is_contiguous()
    z = (y * 2).to(torch.float64)
    assert z.dtype == torch.float64 and z.shape == (6, 4)
    assert z.stride() == (y * 2).stride()
    s = x[1:, ::2]
    assert s.shape == (3, 3) and s.stride() == (6, 2) and s.storage_offset() == 6
    w = torch.randn(6, 2).to("lazy").requires_grad_()
    assert w.requires_grad and not x.requires_grad
    out = x @ w
    assert out.requires_grad and out.grad_fn is not None and out.shape == (4, 2)
    i = torch.arange(3).to("lazy")
    assert (i + 1.5).dtype == torch.float32 and (i * 2).dtype == torch.int64
    assert metrics.counter_value("Sync") == 0, "metadata must not execute anything"


def test_barriers():
    x = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    lx = x.to("lazy")
    assert (lx.sum() * 2).item() == pytest.approx(12.0)
    assert (lx + 1).tolist() == (x + 1).tolist()
    np.testing.assert_allclose((lx * 3).numpy(), (x * 3).numpy())
    assert bool((lx > 0).any())
    assert not bool((lx > 10).any())
    assert "device='lazy:0'" in repr(lx + 1)
    assert str(lx + 1) == repr(x + 1)[:-1] + ", device='lazy:0')"
    assert f"{(lx[0, 0] + 1).item():.1f}" == "2.0"
    if (lx[1, 1] > 3).item():
        branch = lx * 10
    else:
        branch = lx
    torch.testing.assert_close(branch.cpu(), x * 10)


def test_mark_step_makes_device_data():
    x = torch.randn(8).to("lazy")
    y = x * 2 + 1
    z = y.relu()
    assert state(y).storage.base.data is None
    lazymlir.mark_step()
    lazymlir.wait_device_ops()
    assert state(y).storage.base.data is not None and state(z).storage.base.data is not None
    assert metrics.counter_value("MarkStep") == 1
    before = metrics.counter_value("Sync")
    torch.testing.assert_close(z.cpu(), (x.cpu() * 2 + 1).relu())
    assert metrics.counter_value("Sync") == before, "reading computed values must not execute"


def test_module_to_lazy():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    model.to("lazy")
    for p in model.parameters():
        assert p.device.type == "lazy" and p.requires_grad and isinstance(p, nn.Parameter) or p._is_param
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v.cpu(), ref[k])
    model.to("cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_refuses_torch_lazy_ts_backend():
    code = (
        "import torch._lazy, torch._lazy.ts_backend\n"
        "torch._lazy.ts_backend.init()\n"
        "try:\n"
        "    import lazymlir\n"
        "except RuntimeError as e:\n"
        "    assert 'TorchScript backend' in str(e), e\n"
        "    print('refused')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "refused" in out.stdout, out.stderr


def test_set_data_and_save(tmp_path):
    p = nn.Parameter(torch.ones(3)).to("lazy")
    p.data.add_(1)  # through .data: the same storage
    torch.testing.assert_close(p.detach().cpu(), torch.full((3,), 2.0))
    p.data = torch.zeros(3).to("lazy")  # swaps what p holds
    torch.testing.assert_close(p.detach().cpu(), torch.zeros(3))
    m = nn.Linear(2, 2).to("lazy")
    torch.save(m.state_dict(), tmp_path / "sd.pt")
    loaded = torch.load(tmp_path / "sd.pt")  # weights_only: saved as CPU tensors
    assert loaded["weight"].device.type == "cpu"
    torch.testing.assert_close(loaded["weight"], m.weight.detach().cpu())
    copied = __import__("copy").deepcopy(m)
    assert copied.weight.device.type == "lazy"
    torch.testing.assert_close(copied.weight.detach().cpu(), m.weight.detach().cpu())


def test_large_outputs_come_from_the_buffer_pool():
    """Large graph outputs are allocated from the runtime's pool: a freed one
    is reused by the next step (no fresh pages to fault in), a live one is
    never handed out again, and empty_cache() gives idle memory back."""
    import gc

    from lazymlir import _native

    x = torch.randn(1 << 20)
    lx = x.to("lazy")

    def step(scale):
        out = lx * scale + 1
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
        return out

    lazymlir.empty_cache()
    first = step(2.0)
    torch.testing.assert_close(first.cpu(), x * 2.0 + 1)
    assert _native.idle_buffer_bytes() == 0
    del first
    gc.collect()
    assert _native.idle_buffer_bytes() >= 4 << 20  # the output went back
    second = step(2.0)
    assert _native.idle_buffer_bytes() == 0  # ... and was taken again
    third = step(3.0)  # while `second` lives, a different block
    torch.testing.assert_close(second.cpu(), x * 2.0 + 1)
    torch.testing.assert_close(third.cpu(), x * 3.0 + 1)
    del second, third
    gc.collect()
    assert lazymlir.empty_cache() >= 8 << 20
    assert _native.idle_buffer_bytes() == 0


def _pool_functions():
    """The buffer pool's allocate(bytes), release(block), allocate_eager(bytes),
    allocate_output(bytes) and output_ready(block), callable through ctypes."""
    import ctypes

    from lazymlir import _native

    allocate_at, release_at, eager_at, output_at, ready_at = _native.buffer_pool_functions()
    allocate = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
    release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    return allocate(allocate_at), release(release_at), allocate(eager_at), allocate(output_at), release(ready_at)


def test_the_pool_keeps_what_a_step_had_in_use(native_built):
    """Idle blocks are kept up to the most the pool had in use at once, past
    its 1 GiB floor (a BERT-base step's 2.3 GiB of temporaries were given
    back and mapped again every step: 585K page faults, 2.2 s of system time
    per step); empty_cache() gives them back and starts over. (The blocks are
    mapped, never touched: no memory is used.)"""
    from lazymlir import _native

    allocate, release, *_ = _pool_functions()
    block = 512 << 20
    lazymlir.empty_cache()
    blocks = [allocate(block) for _ in range(3)]
    assert all(blocks)
    for b in blocks:
        release(b)
    assert _native.idle_buffer_bytes() == 3 * block  # 1.5 GiB: all kept
    again = [allocate(block) for _ in range(3)]
    assert sorted(again) == sorted(blocks)  # the same blocks, no new pages
    assert _native.idle_buffer_bytes() == 0
    for b in again:
        release(b)
    assert lazymlir.empty_cache() == 3 * block
    assert _native.idle_buffer_bytes() == 0


def test_a_request_takes_an_idle_block_up_to_half_as_large_again(native_built):
    """A size no idle block has exactly takes the least idle block that
    holds it, if at most 1.5x as large (a graph run eagerly asks for sizes
    of its own: fresh mappings beside the idle blocks grew a BERT-base step's
    pool to 3.0 GiB for 2.2 GiB in use); the block keeps its size, in the
    pool's counts too. (Mapped, never touched.)"""
    from lazymlir import _native

    allocate, release, *_ = _pool_functions()
    mib = 1 << 20
    lazymlir.empty_cache()
    big, small = allocate(12 * mib), allocate(9 * mib)
    release(big)
    release(small)
    assert _native.idle_buffer_bytes() == 21 * mib
    assert allocate(8 * mib) == small  # 9 MiB: the least that holds 8
    assert allocate(8 * mib) == big  # 12 MiB = 1.5 x 8
    in_use, peak, idle, _ = _native.buffer_pool_stats()
    assert idle == 0 and in_use >= 21 * mib and peak >= in_use
    release(big)
    other = allocate(7 * mib)  # 12 MiB > 1.5 x 7: a block of its own ...
    assert other not in (big, small)
    assert _native.idle_buffer_bytes() == 5 * mib  # ... made of 12 MiB's head
    release(small)
    release(other)
    assert lazymlir.empty_cache() == 21 * mib


def test_idle_blocks_of_graphs_run_eagerly_go_back_when_compiled_code_lacks_a_size(native_built):
    """Blocks a graph run eagerly took (allocate_eager) are reused like any
    other; once idle, they go back to the system when compiled code asks
    for a size the pool lacks (the first step's graph runs eagerly once: its
    blocks were kept idle beside the compiled steps', BERT-base 3.69 against
    3.07 GiB), while compiled code's idle blocks stay."""
    from lazymlir import _native

    allocate, release, eager, *_ = _pool_functions()
    mib = 1 << 20
    lazymlir.empty_cache()
    mine, theirs = allocate(4 * mib), eager(6 * mib)
    release(mine)
    release(theirs)
    assert eager(6 * mib) == theirs and allocate(4 * mib) == mine  # reused
    release(mine)
    release(theirs)
    assert _native.idle_buffer_bytes() == 10 * mib
    hit = allocate(6 * mib)  # a size the pool has: nothing given back
    assert hit == theirs and _native.idle_buffer_bytes() == 4 * mib
    release(hit)  # now compiled code's block
    again = eager(5 * mib)
    assert again == theirs
    release(again)  # a graph run eagerly's again
    new = allocate(2 * mib)  # lacking: the head of the 4 MiB block, and ...
    assert new not in (mine, theirs)
    assert _native.idle_buffer_bytes() == 2 * mib  # ... the eager block went back
    release(new)
    assert lazymlir.empty_cache() == 4 * mib


def test_a_size_no_idle_block_fits_gets_their_pages(native_built):
    """A size no idle block fits (up to 1.5x) is a fresh mapping whose pages
    are moved in from idle blocks (mremap: no copy, no page fault), whole
    ones smaller than it first, then the head of one that covers the rest:
    the pool holds about what it has in use, whatever the sizes (a BERT-base
    step's pool held 1.2 GiB for 0.75 in use, and each step run eagerly kept
    one phase's blocks idle through the next). A block made of pieces moves
    again piece by piece. Compiled code's and eager runs' requests alike."""
    import ctypes

    from lazymlir import _native

    allocate, release, eager, *_ = _pool_functions()
    mib = 1 << 20
    lazymlir.empty_cache()
    recycled = _native.buffer_pool_stats()[3]
    a, b = allocate(6 * mib), allocate(6 * mib)
    ctypes.memset(a, 0xA1, 6 * mib)
    ctypes.memset(b, 0xB2, 6 * mib)
    release(a)
    release(b)
    c = allocate(11 * mib)  # one 6 MiB block whole, 5 MiB of the other
    assert c not in (a, b) and _native.idle_buffer_bytes() == 0
    assert _native.buffer_pool_stats()[3] - recycled == 11 * mib
    pieces = ctypes.string_at(c, 11 * mib)  # their pages, as they were
    assert set(pieces[: 6 * mib]) == {0xA1} or set(pieces[: 6 * mib]) == {0xB2}
    assert len(set(pieces[6 * mib :])) == 1 and pieces[6 * mib] != pieces[0]
    release(c)
    d = eager(4 * mib)  # the head of c's block; its 7 MiB tail stays idle
    assert _native.idle_buffer_bytes() == 7 * mib
    e = allocate(7 * mib + 512 * 1024)  # the tail whole (two pieces), fresh pages
    release(d)
    assert _native.idle_buffer_bytes() == 4 * mib
    release(e)
    f = allocate(7 * mib + 512 * 1024)
    assert f == e  # the block again, whole
    ctypes.memset(f, 0x5C, 7 * mib + 512 * 1024)
    assert set(ctypes.string_at(f, 7 * mib + 512 * 1024)) == {0x5C}
    release(f)
    assert lazymlir.empty_cache() == 11 * mib + 512 * 1024
    assert _native.buffer_pool_stats()[3] - recycled == 11 * mib + 4 * mib + 7 * mib


def test_pooled_allocations_are_large_ones_of_this_thread_only(native_built):
    """Inside _device.pooled_allocations(True) (a graph run eagerly), torch's
    CPU allocations of 128 KiB and more come from the buffer pool and go back
    to it when the tensor dies; smaller ones, other threads' and any after the
    setting is restored come from torch's allocator."""
    import gc
    import threading

    from lazymlir import _device, _native
    from lazymlir.execution import entries

    entries.native_compiler()  # the pool is handed to the device
    lazymlir.empty_cache()
    previous = _device.pooled_allocations(True)
    try:
        big = torch.empty(1 << 20)  # 4 MiB
        small = torch.empty(1000)
        other = []
        thread = threading.Thread(target=lambda: other.append(torch.empty(1 << 20)))
        thread.start()
        thread.join()
        assert _device.pooled_allocations(True) is True
    finally:
        assert _device.pooled_allocations(previous) is True
    after = torch.empty(1 << 20)
    for t in (big, small, other[0], after):
        t.fill_(1.5)
    assert _native.idle_buffer_bytes() == 0
    other.clear()
    del small, after
    gc.collect()
    assert _native.idle_buffer_bytes() == 0  # none of them was the pool's
    resized = big.clone()
    del big
    gc.collect()
    assert _native.idle_buffer_bytes() == 4 << 20
    resized.resize_(1 << 21)  # outside the scope: torch's allocator again
    assert _native.idle_buffer_bytes() == 4 << 20
    assert lazymlir.empty_cache() == 4 << 20


def test_a_graph_run_eagerly_takes_its_temporaries_from_the_pool(native_built):
    """entries.run_fx (compile fallbacks, graphs waiting for their compile
    aside): the graph's large temporaries are pool blocks, kept for the next
    run (a fresh glibc mapping would fault its pages in each time); its
    results are eager's."""
    from lazymlir import _native
    from lazymlir.execution import entries

    def fn(x, w):
        h = torch.relu(x @ w)
        return (torch.softmax(h * 2.0, dim=-1) + h,)

    gm = torch.fx.symbolic_trace(fn)
    x, w = torch.randn(512, 256), torch.randn(256, 512)
    entries.native_compiler()
    lazymlir.empty_cache()
    out = torch.empty(512, 512)
    entries.run_fx(gm, [x, w], [out])
    torch.testing.assert_close(out, fn(x, w)[0])
    idle = _native.idle_buffer_bytes()
    assert idle >= 3 * 512 * 512 * 4  # h, h * 2.0, the softmax: 1 MiB each
    entries.run_fx(gm, [x, w], [out])
    assert _native.idle_buffer_bytes() == idle  # the same blocks again
    torch.testing.assert_close(out, fn(x, w)[0])
    lazymlir.empty_cache()


def test_a_graph_run_eagerly_holds_an_output_once(native_built):
    """Once run_fx has written a result into its output buffer, later ops
    read the buffer and the result dies: an optimizer's new moments, read by
    the parameter update, were held twice until it (BERT-base run eagerly:
    1.13 GiB of temporaries at once, 0.65 after)."""
    from lazymlir import _native
    from lazymlir.execution import entries

    def fn(x):
        y = x * 2.0  # an output, read again below
        z = y + 1.0
        return (y, z * y)

    gm = torch.fx.symbolic_trace(fn)
    x = torch.randn(1 << 20)  # 4 MiB
    entries.native_compiler()
    outs = [torch.empty_like(x), torch.empty_like(x)]
    lazymlir.empty_cache()  # the most in use at once starts over
    base = _native.buffer_pool_stats()[0]
    entries.run_fx(gm, [x], outs)
    for got, want in zip(outs, fn(x)):
        torch.testing.assert_close(got, want)
    # y, then z and z * y: two temporaries at once, not three.
    assert _native.buffer_pool_stats()[1] - base <= 2 * x.nbytes
    lazymlir.empty_cache()


def test_an_output_gets_its_pages_when_first_written(native_built):
    """Outputs are allocated before a graph runs (destination passing) but
    get their pages only when the compiled code is about to write them
    (lazymlir-outputs-at-first-write), moved in from the pool's idle blocks:
    here the product's temporary, freed by the sum before the output is
    written. A training step's gradients were held through its forward
    (BERT-base: 0.41 GiB). The pool holds the temporary or the output, not
    both; the values are eager's."""
    import gc

    from lazymlir import _native

    x, w, y = torch.randn(1024, 1024), torch.randn(1024, 1024), torch.randn(512, 1024)
    lx, lw, ly = x.to("lazy"), w.to("lazy"), y.to("lazy")
    lazymlir.empty_cache()
    for _ in range(2):
        _, _, _, recycled = _native.buffer_pool_stats()
        base = _native.buffer_pool_stats()[0]
        out = ly * (lx @ lw).softmax(-1).sum(0)  # the product: a 4 MiB temporary
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
        in_use, peak, _, now = _native.buffer_pool_stats()
        assert now - recycled >= y.nbytes  # the output's pages were the product's
        assert peak - base <= x.nbytes  # the product or the output, not both
        torch.testing.assert_close(out.cpu(), y * (x @ w).softmax(-1).sum(0), rtol=1e-4, atol=1e-3)
        assert_compiled()
        del out
        gc.collect()
        lazymlir.empty_cache()


def test_an_output_written_before_its_graph_keeps_its_values(native_built):
    """An output buffer some other code wrote before the graph's first write
    keeps what was written: the pool moves pages only into a buffer with
    none. And one nobody wrote goes back to the system when it dies."""
    import ctypes

    from lazymlir import _native

    _, release, _, allocate_output, ready = _pool_functions()
    mib = 1 << 20
    lazymlir.empty_cache()
    _, _, _, recycled = _native.buffer_pool_stats()
    idle_block = allocate_output(4 * mib)
    ready(idle_block)
    ctypes.memset(idle_block, 7, 4 * mib)
    release(idle_block)  # idle, 4 MiB of pages
    assert _native.idle_buffer_bytes() == 4 * mib
    written = allocate_output(4 * mib)
    ctypes.memset(written, 1, 4 * mib)  # written without announcing it
    ready(written)
    assert ctypes.string_at(written, 4 * mib) == b"\x01" * (4 * mib)
    assert _native.idle_buffer_bytes() == 4 * mib  # nothing moved
    fresh = allocate_output(4 * mib)
    ready(fresh)  # the idle block's pages, and its values (the graph overwrites them)
    assert _native.idle_buffer_bytes() == 0
    assert _native.buffer_pool_stats()[3] - recycled == 4 * mib
    assert ctypes.string_at(fresh, 4 * mib) == b"\x07" * (4 * mib)
    unwritten = allocate_output(4 * mib)
    for block in (written, fresh, unwritten):
        release(block)
    assert _native.idle_buffer_bytes() == 8 * mib  # the unwritten one went back
    assert lazymlir.empty_cache() == 8 * mib


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64, torch.bool])
def test_large_outputs_of_every_dtype(native_built, dtype):
    """Pooled outputs are made with their dtype and shape: eager's values,
    and the memory goes back to the pool when the result dies."""
    import gc

    from lazymlir import _native
    from lazymlir.execution import run

    x = (torch.randn(256, 1024) * 100).to(dtype)
    fn = (lambda t: ~t) if dtype is torch.bool else (lambda t: t * 3)
    lazymlir.empty_cache()
    out = fn(x.to("lazy"))
    lazymlir.mark_step()
    got = out.cpu()
    assert got.dtype == dtype and got.shape == (256, 1024)
    torch.testing.assert_close(got, fn(x))
    assert_compiled()
    del out, got
    gc.collect()
    assert _native.idle_buffer_bytes() >= x.nbytes
    # Any dtype, compiled graphs' or not, comes from the pool; it goes back
    # when the tensor dies.
    half = run.output_buffer((256, 1024), torch.float16)
    assert half.dtype == torch.float16 and half.shape == (256, 1024) and half.is_contiguous()
    half.fill_(2.0)
    assert bool((half == 2.0).all())
    idle = _native.idle_buffer_bytes()
    del half
    assert _native.idle_buffer_bytes() == idle + 256 * 1024 * 2


def test_inference_mode(native_built):
    """torch.inference_mode() around a lazy model (Hugging Face pipelines use
    it): every view failed ("Cannot set version_counter for inference
    tensor": ADInplaceOrView makes a view share its normal base's version
    counter, and the lazy result was an inference tensor), so nn.Linear did.
    Lazy tensors are normal tensors in inference mode; results equal eager's
    and the model trains afterwards."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))
    lazy = copy.deepcopy(model).to("lazy")
    x = torch.randn(5, 4)
    with torch.inference_mode():
        expected = model(x).transpose(0, 1).reshape(-1)
        got = lazy(x.to("lazy")).transpose(0, 1).reshape(-1).cpu()
    torch.testing.assert_close(got, expected)
    lazy(x.to("lazy")).sum().backward()
    model(x).sum().backward()
    lazymlir.mark_step()
    torch.testing.assert_close(lazy[0].weight.grad.cpu(), model[0].weight.grad)
    assert_compiled()

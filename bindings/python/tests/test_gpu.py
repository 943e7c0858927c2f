"""On a GPU: the CUDA prefill over a cached prefix against torch's own attention with the
same token mask. Skips without torch or a CUDA device."""

import pytest

import bspa

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or bspa.device_count("cuda") == 0:
    pytest.skip("no CUDA device (or a libbspa built without CUDA)", allow_module_level=True)

HQ, HKV, D, PAGE, BLOCK, LOCAL, VERT = 8, 2, 128, 16, 64, 2, 4
SCALE = 1.0 / 128


def torch_mask(ctx, q, heads, homo):
    """[heads, q, ctx + q] bool, True where new token i (position ctx + i) sees key j."""
    s = 0 if homo else max(1, VERT // heads)
    p = torch.arange(ctx, ctx + q, device="cuda")[:, None]
    j = torch.arange(ctx + q, device="cuda")[None, :]
    qb, kb = p // BLOCK, j // BLOCK
    h = torch.arange(heads, device="cuda")[:, None, None]
    allowed = (kb <= qb) & ((qb - kb < LOCAL) | ((kb + h * s + 1) % VERT == 0))
    return allowed & (j <= p)


@pytest.mark.parametrize("homo", [False, True])
@pytest.mark.parametrize("ctx,q", [(0, 300), (200, 170), (1090, 77), (512, 1)])
def test_cuda_prefill_matches_torch_attention(ctx, q, homo):
    gen = torch.Generator(device="cuda").manual_seed(ctx * 1000 + q)
    total = ctx + q
    qs = torch.randn(total, HQ, D, device="cuda", generator=gen).to(torch.bfloat16)
    ks = torch.randn(total, HKV, D, device="cuda", generator=gen).to(torch.bfloat16)
    vs = torch.randn(total, HKV, D, device="cuda", generator=gen).to(torch.bfloat16)
    layout = bspa.Layout.strided(num_heads=HQ, block_size=BLOCK, local_blocks=LOCAL, vert_stride=VERT,
                                 homo_head=homo)
    stream = torch.cuda.Stream()
    with bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=PAGE, num_pages=128, dtype="bf16",
                   device="cuda") as pool, torch.cuda.stream(stream):
        seq = pool.sequence()
        seq.append(list(range(total)))
        if ctx:  # the cached prefix, computed by an earlier step
            with pool.batch([seq], [ctx]) as batch:
                pool.kv_write(batch, 0, ks[:ctx], vs[:ctx])
            seq.commit(ctx)
        with pool.batch([seq], [q]) as batch:
            pool.kv_write(batch, 0, ks[ctx:], vs[ctx:])
            out = torch.full((q, HQ, D), float("nan"), device="cuda", dtype=torch.bfloat16)
            lse = torch.full((HQ, q), float("nan"), device="cuda")
            pool.prefill(batch, 0, layout, qs[ctx:], out, scale=SCALE, lse=lse)  # on `stream`
            stream.synchronize()
    group = HQ // HKV
    k = ks.float().repeat_interleave(group, dim=1).transpose(0, 1)  # [HQ, total, D]
    v = vs.float().repeat_interleave(group, dim=1).transpose(0, 1)
    mask = torch_mask(ctx, q, HQ, homo)
    ref = torch.nn.functional.scaled_dot_product_attention(
        qs[ctx:].float().transpose(0, 1), k, v, attn_mask=mask, scale=SCALE).transpose(0, 1)
    logits = (qs[ctx:].float().transpose(0, 1) @ k.transpose(1, 2)) * SCALE
    ref_lse = torch.logsumexp(logits.masked_fill(~mask, float("-inf")), dim=-1)
    err = (out.float() - ref).norm() / ref.norm()
    assert not out.isnan().any()
    assert err <= 1e-2, f"relative L2 error {err:.3g}, max {(out.float() - ref).abs().max():.3g}"
    assert ((lse - ref_lse).norm() / ref_lse.norm()) <= 1e-2


def test_cuda_pool_kv_is_a_torch_tensor_on_the_gpu_that_keeps_the_storage():
    with bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=PAGE, num_pages=16, dtype="bf16",
                   device="cuda") as pool:
        seq = pool.sequence()
        seq.append(list(range(40)))
        ks = torch.randn(40, HKV, D, device="cuda").to(torch.bfloat16)
        with pool.batch([seq], [40]) as batch:
            pool.kv_write(batch, 0, ks, -ks)
        torch.cuda.synchronize()
        pages = seq.pages()
        k, v = (torch.from_dlpack(t) for t in pool.kv(0))
    # The pool is closed; the tensors still own its storage.
    assert k.is_cuda and k.dtype == torch.bfloat16 and tuple(k.shape) == (16, HKV, PAGE, D)
    assert torch.equal(k[int(pages[2]), :, 1], ks[2 * PAGE + 1])  # token 33: page 2, slot 1
    assert torch.equal(v[int(pages[0]), :, 5], -ks[5])

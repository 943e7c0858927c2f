"""KV transfer between pools through the Python API: PoolMemory descriptors, exports,
imports as transactions (commit on a clean exit, abort on an exception), with ctypes.memmove
as the transport between two CPU pools."""

import ctypes

import numpy as np
import pytest

import bspa
from child import run_child

HQ, HKV, D, PS, LAYERS = 4, 2, 32, 16, 2


def rows(start, n, heads, layer, which):
    """Deterministic per (position, layer, K/V/q): every pool computes the same KV for a position."""
    i = np.arange(start * heads * D, (start + n) * heads * D, dtype=np.float64)
    return np.sin(i * 0.618 + 10 * layer + which).astype(np.float32).reshape(n, heads, D)


def compute(pool, layout, seq, n):
    """Computes the next n appended tokens of seq on every layer; returns the outputs."""
    start = seq.num_computed
    outs = []
    with pool.batch([seq], [n]) as batch:
        for layer in range(LAYERS):
            pool.kv_write(batch, layer, rows(start, n, HKV, layer, 1), rows(start, n, HKV, layer, 2))
            outs.append(pool.prefill(batch, layer, layout, rows(start, n, HQ, layer, 3), scale=1 / 8))
    seq.commit(start + n)
    return np.stack(outs)


def prefill(pool, layout, tokens):
    with pool.sequence() as seq:
        seq.append(tokens)
        compute(pool, layout, seq, len(tokens))


def turn(pool, layout, tokens):
    with pool.sequence() as seq:
        cached = seq.match(tokens)
        seq.append(tokens[cached:])
        return cached, compute(pool, layout, seq, len(tokens) - cached)


def make_pool(pages, **kw):
    args = dict(num_kv_heads=HKV, head_dim=D, page_size=PS, num_layers=LAYERS, num_pages=pages, dtype="f32")
    args.update(kw)
    return bspa.Pool(**args)


def copy(src_descs, dst_descs):
    """The transport: one memmove per descriptor pair."""
    assert len(src_descs) == len(dst_descs)
    for (sa, sn, _), (da, dn, _) in zip(src_descs, dst_descs):
        assert sn == dn
        ctypes.memmove(da, sa, sn)
    return sum(n for _, n, _ in src_descs)


PROMPT = (np.arange(7 * PS + 5) * 7919 % 32000).astype(np.int32)
NEXT = np.concatenate([PROMPT, 40000 + np.arange(20, dtype=np.int32)])


@pytest.fixture
def layout():
    with bspa.Layout.dense(HQ) as lay:
        yield lay


def test_memory_describes_the_storage():
    with make_pool(10) as pool:
        m = pool.memory()
        assert (m.device_type, m.device_id, m.num_regions, m.num_pages) == (bspa.kDLCPU, 0, 2 * LAYERS, 10)
        assert m.page_bytes == HKV * PS * D * 4 and m.region_bytes == 10 * m.page_bytes
        assert m.nixl_mem_type == "DRAM"
        assert m.regions(per_layer=False) == [(m.base, m.bytes, 0)]
        assert m.registration() == [(m.base, m.bytes, 0, "")]
        assert len(m.regions()) == 2 * LAYERS
        k1 = pool.kv(1)[0]
        assert m.page_address(1, bspa.KV_K, 0) == k1.ctypes.data
        descs = m.page_descs([3, 7])
        assert len(descs) == 2 * 2 * LAYERS
        assert descs[0] == (m.page_address(0, 0, 3), m.page_bytes, 0)
        assert descs[2 * LAYERS + 3] == (m.page_address(1, 1, 7), m.page_bytes, 0)
        assert m.page_descs([5], layers=[1]) == [(m.page_address(1, 0, 5), m.page_bytes, 0),
                                                 (m.page_address(1, 1, 5), m.page_bytes, 0)]
        assert bspa.PoolMemory.from_dict(m.to_dict()) == m
        with pytest.raises(IndexError):
            m.page_descs([10])
        with pytest.raises(IndexError):
            m.page_address(LAYERS, 0, 0)


def test_roundtrip_hits_the_whole_prefix_bitwise(layout):
    with make_pool(64) as exporter, make_pool(24) as importer:
        prefill(exporter, layout, PROMPT)
        # Fragment the importer: cached chains of other prompts and live sequences.
        live = []
        for j in range(4):
            with importer.sequence() as gone:
                gone.append(np.arange(2 * PS, dtype=np.int32) + 1000 * j)
                gone.commit(2 * PS)
            s = importer.sequence()
            s.append(np.arange(PS + 3, dtype=np.int32) + 500000 + 1000 * j)
            live.append(s)
        src_mem = exporter.memory()
        with exporter.export_kv(PROMPT) as exp:
            assert len(exp.pages) == 7 and exp.num_tokens == 7 * PS  # every full page: no n-1 cap
            assert exp.keys.shape == (7, 2) and exp.keys.dtype == np.uint64
            peer = bspa.PoolMemory.from_dict(src_mem.to_dict())  # what the wire carries
            with importer.import_kv(PROMPT[:exp.num_tokens], peer_fingerprint=peer.fingerprint,
                                    peer_keys=exp.keys) as imp:
                assert (imp.num_blocks, imp.num_cached, imp.state) == (7, 0, "reserved")
                assert list(imp.blocks) == list(range(7))
                moved = copy(peer.page_descs(exp.pages[imp.blocks]), imp.descs())
                assert moved == 7 * 2 * LAYERS * src_mem.page_bytes
            assert imp.closed and imp.state == "committed" and imp.published == 7
        importer.check()
        exporter.check()
        ca, oa = turn(exporter, layout, NEXT)
        cb, ob = turn(importer, layout, NEXT)
        assert ca == cb == 7 * PS
        assert np.array_equal(oa.view(np.uint32), ob.view(np.uint32)), "outputs differ bit for bit"
        for s in live:
            s.close()
        importer.check()


def test_partial_overlap_moves_only_missing_pages(layout):
    with make_pool(48) as exporter, make_pool(40) as importer:
        prefill(exporter, layout, PROMPT)
        fp = exporter.memory().fingerprint
        for n_tokens, cached in ((3 * PS, 0), (len(PROMPT), 3)):
            with exporter.export_kv(PROMPT[:n_tokens]) as exp:
                with importer.import_kv(PROMPT[:exp.num_tokens], peer_fingerprint=fp, peer_keys=exp.keys) as imp:
                    assert imp.num_cached == cached
                    assert list(imp.blocks) == list(range(cached, len(exp.pages)))
                    copy(exporter.memory().page_descs(exp.pages[imp.blocks]), imp.descs())
        ca, oa = turn(exporter, layout, NEXT)
        cb, ob = turn(importer, layout, NEXT)
        assert ca == cb == 7 * PS
        assert np.array_equal(oa.view(np.uint32), ob.view(np.uint32))


def test_an_exception_aborts_and_leaves_stats_as_before(layout):
    with make_pool(16) as exporter, make_pool(16) as importer:
        prefill(exporter, layout, PROMPT)
        fp = exporter.memory().fingerprint
        before = importer.stats()
        with pytest.raises(RuntimeError, match="transfer failed"):
            with importer.import_kv(PROMPT, peer_fingerprint=fp) as imp:
                assert importer.stats().pages_in_use == 7
                with importer.sequence() as s:  # reserved pages are not matchable before commit
                    assert s.match(NEXT) == 0
                raise RuntimeError("transfer failed")
        after = importer.stats()
        # The probing match above counted; everything else is as before.
        assert (after.pages_free, after.pages_cached, after.pages_in_use, after.published_pages, after.evictions) == \
               (before.pages_free, before.pages_cached, before.pages_in_use, before.published_pages, before.evictions)
        importer.check()
        with importer.sequence() as s:
            assert s.match(NEXT) == 0, "an aborted import published nothing"
        # Explicit abort and its state; a closed import raises.
        imp = importer.import_kv(PROMPT, peer_fingerprint=fp)
        imp.abort()
        imp.abort()
        assert imp.state == "aborted"
        with pytest.raises(bspa.InvalidStateError):
            imp.commit()
        imp.close()
        with pytest.raises(bspa.InvalidStateError):
            imp.commit()
        # Closing the pool aborts an open import first.
        imp = importer.import_kv(PROMPT, peer_fingerprint=fp)
    assert imp.closed and imp.state == "aborted"


def test_mismatched_fingerprint_and_keys_are_refused():
    with make_pool(16) as a, make_pool(16, head_dim=2 * D) as b, make_pool(16, hash_seed=7) as c:
        assert a.memory().fingerprint != b.memory().fingerprint != c.memory().fingerprint
        assert a.memory().fingerprint == make_pool(99).memory().fingerprint
        with pytest.raises(bspa.InvalidArgumentError, match="peer_fingerprint"):
            b.import_kv(PROMPT, peer_fingerprint=a.memory().fingerprint)
        assert b.stats().pages_in_use == 0
        keys = np.zeros((7, 2), dtype=np.uint64)
        with pytest.raises(bspa.InvalidArgumentError, match=r"peer_keys\[0\]"):
            a.import_kv(PROMPT, peer_fingerprint=a.memory().fingerprint, peer_keys=keys)
        with pytest.raises(bspa.InvalidArgumentError, match="num_peer_keys"):
            a.import_kv(PROMPT, peer_fingerprint=a.memory().fingerprint, peer_keys=keys[:3])
        with pytest.raises(bspa.OutOfPagesError):
            a.import_kv(np.arange(17 * PS, dtype=np.int32), peer_fingerprint=a.memory().fingerprint)
        a.check()


def test_salted_prompts_export_only_to_the_same_salt(layout):
    with make_pool(32) as pool:
        with pool.sequence(salt=b"tenant-a") as s:
            s.append(PROMPT)
            compute(pool, layout, s, len(PROMPT))
        with pool.export_kv(PROMPT) as e:
            assert len(e.pages) == 0
        with pool.export_kv(PROMPT, salt=b"tenant-a") as e:
            assert len(e.pages) == 7
            assert pool.stats().pages_in_use == 7
        assert pool.stats().pages_in_use == 0


@pytest.mark.skipif(bspa.device_count("cuda") == 0, reason="no CUDA device")
def test_cuda_pool_describes_vram():
    with bspa.Pool(num_kv_heads=HKV, head_dim=64, page_size=PS, num_layers=LAYERS, num_pages=8, device="cuda") as p:
        m = p.memory()
        assert m.nixl_mem_type == "VRAM" and m.device_type == bspa.kDLCUDA
        assert m.page_address(0, 0, 0) == m.base
        assert m.fingerprint == make_pool(8, dtype="bf16", head_dim=64).memory().fingerprint


def test_a_garbage_cycle_of_pool_and_transfers_frees_them_before_the_pool():
    # As for batches (test_reusable_batch): a cycle holding pools, a sequence, an export and
    # an open import is finalized in any order, and the pools' weak sets of transfers are
    # cleared first, so closing a pool cannot reach them. Their pool's storage destroys them
    # before the C pool: every export and import is destroyed exactly once (counted), none
    # after its pool (MALLOC_PERTURB_ poisons freed memory) and none leaked.
    code = """
        import gc, bspa
        from bspa import _bspa
        from child import engine_in_cycle
        calls = {"export": 0, "import": 0}
        real_export, real_import = _bspa.bspa_kv_export_destroy, _bspa.bspa_kv_import_destroy
        def export_destroy(h):
            calls["export"] += 1
            real_export(h)
        def import_destroy(h):
            calls["import"] += 1
            real_import(h)
        _bspa.bspa_kv_export_destroy, _bspa.bspa_kv_import_destroy = export_destroy, import_destroy
        gc.disable()
        for i in range(20):
            e = engine_in_cycle(bspa, num_kv_heads=2, head_dim=16, page_size=16, num_pages=32, dtype="f32")
            e.other = bspa.Pool(num_kv_heads=2, head_dim=16, page_size=16, num_pages=32, dtype="f32")
            e.seq = e.pool.sequence()
            tokens = list(range(40))
            e.seq.append(tokens)
            e.export = e.pool.export_kv(tokens)
            e.imp = e.other.import_kv(tokens[:32], peer_fingerprint=e.other.memory().fingerprint)
            if i % 2:
                e.pool.engine = e  # the pools in the cycle themselves
                e.other.engine = e
            del e
            gc.collect()
        print(calls["export"], calls["import"])
    """
    run = run_child(code, MALLOC_PERTURB_="165")
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr}"
    assert run.stdout.split() == ["20", "20"], f"exports and imports destroyed: {run.stdout!r} (20 each expected)"

//! The safe crate on the CPU backend: prefix hits, errors, and the prefill (from the pool,
//! and over caller-owned pages with prefill_paged) against a float64 reference built from
//! the token-level mask (docs/design.md §2).

mod common;

use bspa::{DType, ErrorKind, Layout, Pool, PoolOptions, StridedOptions};
use common::host_tensor;

const HQ: usize = 4;
const HKV: usize = 2;
const D: usize = 16;
const PAGE: i32 = 16;
const BLOCK: i64 = 16;
const LOCAL: i64 = 2;
const VERT: i64 = 3;
const SCALE: f32 = 0.3;

fn pool(num_pages: i64) -> Pool {
    Pool::new(&PoolOptions {
        dtype: DType::F32,
        num_kv_heads: HKV as i32,
        head_dim: D as i32,
        page_size: PAGE,
        num_pages,
        ..Default::default()
    })
    .expect("pool")
}

/// SplitMix64 plus Box-Muller: N(0, 1) inputs without external crates.
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
    fn normals(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal()).collect()
    }
    fn tokens(&mut self, n: usize) -> Vec<i32> {
        (0..n).map(|_| (self.next_u64() % 32000) as i32).collect()
    }
}

/// Q/K/V of every absolute position of one conversation ([pos][head][dim]).
struct Conversation {
    tokens: Vec<i32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl Conversation {
    fn new(rng: &mut Rng, len: usize) -> Self {
        Conversation {
            tokens: rng.tokens(len),
            q: rng.normals(len * HQ * D),
            k: rng.normals(len * HKV * D),
            v: rng.normals(len * HKV * D),
        }
    }
}

fn strided_allowed(h: i64, qb: i64, kb: i64) -> bool {
    let s = std::cmp::max(1, VERT / HQ as i64);
    kb <= qb && (qb - kb < LOCAL || (kb + h * s + 1) % VERT == 0)
}

/// Attention of new tokens [ctx, ctx + q) over keys [0, ctx + q), in f64, masked per token.
fn reference(c: &Conversation, ctx: usize, q: usize, allowed: &dyn Fn(i64, i64, i64) -> bool) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0f64; q * HQ * D];
    let mut lse = vec![0f64; HQ * q];
    for h in 0..HQ {
        let kvh = h / (HQ / HKV);
        for i in 0..q {
            let p = ctx + i;
            let visible: Vec<usize> =
                (0..=p).filter(|&j| allowed(h as i64, p as i64 / BLOCK, j as i64 / BLOCK)).collect();
            let logits: Vec<f64> = visible
                .iter()
                .map(|&j| {
                    (0..D).map(|d| c.q[(p * HQ + h) * D + d] as f64 * c.k[(j * HKV + kvh) * D + d] as f64).sum::<f64>()
                        * SCALE as f64
                })
                .collect();
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
            let denom: f64 = weights.iter().sum();
            for (w, &j) in weights.iter().zip(&visible) {
                for d in 0..D {
                    out[(i * HQ + h) * D + d] += w / denom * c.v[(j * HKV + kvh) * D + d] as f64;
                }
            }
            lse[h * q + i] = denom.ln() + m;
        }
    }
    (out, lse)
}

fn rel_l2(actual: &[f32], expected: &[f64]) -> f64 {
    let num: f64 = actual.iter().zip(expected).map(|(a, e)| (*a as f64 - e).powi(2)).sum();
    let den: f64 = expected.iter().map(|e| e * e).sum();
    (num / den).sqrt()
}

/// One batch over `work` = [(sequence, conversation, ctx, q)]: kv_write, then prefill;
/// returns out and lse.
fn step(pool: &Pool, layout: &Layout, work: &[(&bspa::Sequence, &Conversation, usize, usize)]) -> (Vec<f32>, Vec<f32>) {
    let seqs: Vec<&bspa::Sequence> = work.iter().map(|w| w.0).collect();
    let lens: Vec<i32> = work.iter().map(|w| w.3 as i32).collect();
    let batch = pool.batch(&seqs, &lens).expect("batch");
    let (mut k, mut v, mut q) = (Vec::new(), Vec::new(), Vec::new());
    for &(_, c, ctx, n) in work {
        k.extend_from_slice(&c.k[ctx * HKV * D..(ctx + n) * HKV * D]);
        v.extend_from_slice(&c.v[ctx * HKV * D..(ctx + n) * HKV * D]);
        q.extend_from_slice(&c.q[ctx * HQ * D..(ctx + n) * HQ * D]);
    }
    let total = batch.num_tokens();
    pool.kv_write_host(&batch, 0, &k, &v).expect("kv_write");
    let mut out = vec![f32::NAN; q.len()]; // poisoned: unwritten rows fail
    let mut lse = vec![f32::NAN; HQ * total];
    pool.prefill_host(&batch, 0, layout, &q, &mut out, SCALE, Some(&mut lse)).expect("prefill");
    (out, lse)
}

/// Checks the rows of `out`/`lse` of a launch over `work` = [(conversation, ctx, q)]
/// against the reference.
fn check_rows(
    out: &[f32],
    lse: &[f32],
    work: &[(&Conversation, usize, usize)],
    allowed: &dyn Fn(i64, i64, i64) -> bool,
) {
    let total = lse.len() / HQ;
    let mut row = 0;
    for &(c, ctx, n) in work {
        let (ref_out, ref_lse) = reference(c, ctx, n, allowed);
        let got = &out[row * HQ * D..(row + n) * HQ * D];
        let err = rel_l2(got, &ref_out);
        assert!(err <= 1e-5, "ctx {} q {}: relative L2 error {:e}", ctx, n, err);
        let got_lse: Vec<f32> = (0..HQ).flat_map(|h| lse[h * total + row..h * total + row + n].to_vec()).collect();
        assert!(rel_l2(&got_lse, &ref_lse) <= 1e-5, "lse of ctx {} q {}", ctx, n);
        row += n;
    }
    assert_eq!(row, total);
}

/// One batch over `work` = [(sequence, conversation, ctx, q)]: kv_write, prefill, check
/// every sequence's rows against the reference.
fn step_and_check(
    pool: &Pool,
    layout: &Layout,
    work: &[(&bspa::Sequence, &Conversation, usize, usize)],
    allowed: &dyn Fn(i64, i64, i64) -> bool,
) {
    let (out, lse) = step(pool, layout, work);
    let rows: Vec<(&Conversation, usize, usize)> = work.iter().map(|&(_, c, ctx, n)| (c, ctx, n)).collect();
    check_rows(&out, &lse, &rows, allowed);
}

fn strided_layout() -> Layout {
    Layout::strided(&StridedOptions {
        block_size: BLOCK as i32,
        local_blocks: LOCAL as i32,
        vert_stride: VERT as i32,
        homo_head: false,
        num_heads_total: HQ as i32,
        head_begin: 0,
        num_heads: HQ as i32,
    })
    .expect("layout")
}

#[test]
fn abi_and_version() {
    bspa::check_abi().unwrap();
    assert_eq!(bspa::version(), "0.1.0");
    assert!(bspa::build_info().contains("cpu"));
}

/// The launch args structs through bspa-sys: init fills the header's defaults, and a
/// struct of an unknown version is refused (before the pool or batch is looked at).
#[test]
fn launch_args_structs_are_versioned() {
    use bspa::sys;
    use std::ptr;
    unsafe {
        let mut kw = std::mem::zeroed::<sys::bspa_kv_write_args>();
        assert_eq!(sys::bspa_kv_write_args_init(&mut kw), sys::BSPA_OK as i32);
        assert_eq!(kw.version, sys::BSPA_KV_WRITE_ARGS_VERSION);
        assert_eq!(kw.layer, 0);
        assert!(kw.k_new.is_null() && kw.v_new.is_null());
        for version in [0, sys::BSPA_KV_WRITE_ARGS_VERSION + 1] {
            kw.version = version;
            let status = sys::bspa_kv_write(ptr::null_mut(), ptr::null(), &kw, ptr::null_mut());
            assert_eq!(status, sys::BSPA_ERR_VERSION as i32);
        }
        let status = sys::bspa_kv_write(ptr::null_mut(), ptr::null(), ptr::null(), ptr::null_mut());
        assert_eq!(status, sys::BSPA_ERR_NULL_POINTER as i32);

        let mut pf = std::mem::zeroed::<sys::bspa_prefill_args>();
        assert_eq!(sys::bspa_prefill_args_init(&mut pf), sys::BSPA_OK as i32);
        assert_eq!(pf.version, sys::BSPA_PREFILL_ARGS_VERSION);
        assert_eq!((pf.layer, pf.scale), (0, 1.0));
        assert!(pf.layout.is_null() && pf.q.is_null() && pf.out.is_null() && pf.lse.is_null());
        for version in [0, sys::BSPA_PREFILL_ARGS_VERSION + 1] {
            pf.version = version;
            let status = sys::bspa_prefill(ptr::null_mut(), ptr::null(), &pf, ptr::null_mut());
            assert_eq!(status, sys::BSPA_ERR_VERSION as i32);
        }
    }
}

#[test]
fn prefix_hit() {
    let mut rng = Rng(1);
    let pool = pool(8);
    let prompt = rng.tokens(40);
    {
        let first = pool.sequence().unwrap();
        assert_eq!(first.match_prefix(&prompt).unwrap(), 0);
        first.append(&prompt).unwrap();
        first.commit(prompt.len()).unwrap();
    } // dropped: its full pages stay cached
    let mut follow_up = prompt.clone();
    follow_up.extend(rng.tokens(9));
    let second = pool.sequence().unwrap();
    assert_eq!(second.match_prefix(&follow_up).unwrap(), 32);
    let info = second.info().unwrap();
    assert_eq!((info.num_tokens, info.num_cached, info.num_pages), (32, 32, 2));
    let stats = pool.stats().unwrap();
    assert_eq!((stats.hits, stats.misses, stats.matched_tokens), (1, 1, 32));
    let other_tenant = pool.sequence_with(b"tenant-b", 0).unwrap();
    assert_eq!(other_tenant.match_prefix(&follow_up).unwrap(), 0);
    pool.check().unwrap();
}

#[test]
fn out_of_pages_is_an_error_kind_and_changes_nothing() {
    let pool = pool(4);
    let seq = pool.sequence().unwrap();
    seq.append(&(0..20).collect::<Vec<i32>>()).unwrap();
    let (stats, info) = (pool.stats().unwrap(), seq.info().unwrap());
    let err = seq.append(&(0..100).collect::<Vec<i32>>()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfPages);
    assert_eq!((err.status(), err.category()), (300, 3));
    assert!(err.message().contains("bspa_seq_append"), "{}", err);
    assert!(err.to_string().starts_with("BSPA_ERR_OUT_OF_PAGES: "));
    assert_eq!(seq.info().unwrap(), info);
    assert_eq!(pool.stats().unwrap(), stats);
    pool.check().unwrap();
}

#[test]
fn invalid_arguments_name_the_value() {
    let err = Pool::new(&PoolOptions { page_size: 48, num_pages: 4, ..Default::default() }).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("page_size = 48"), "{}", err);
    let layout = strided_layout();
    assert_eq!(layout.allowed(HQ as i32, 0, 0).unwrap_err().kind(), ErrorKind::OutOfRange);
    let err = Layout::csr(1, 16, 2, &[0, 1], &[0]).unwrap_err(); // crow too short
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn strided_layout_follows_the_rule() {
    let layout = strided_layout();
    for h in 0..HQ as i64 {
        for qb in 0..12 {
            for kb in 0..12 {
                assert_eq!(
                    layout.allowed(h as i32, qb, kb).unwrap(),
                    strided_allowed(h, qb, kb),
                    "{} {} {}",
                    h,
                    qb,
                    kb
                );
            }
        }
    }
}

#[test]
fn two_turns_with_a_prefix_hit_match_the_reference() {
    let mut rng = Rng(7);
    let conv = Conversation::new(&mut rng, 115);
    let pool = pool(32);
    for (round, (layout, allowed)) in [
        (strided_layout(), &strided_allowed as &dyn Fn(i64, i64, i64) -> bool),
        (Layout::dense(HQ as i32).unwrap(), &|_h: i64, qb: i64, kb: i64| kb <= qb),
    ]
    .into_iter()
    .enumerate()
    {
        let salt = format!("round {}", round); // a fresh cache for each layout
        {
            let first = pool.sequence_with(salt.as_bytes(), 0).unwrap();
            assert_eq!(first.match_prefix(&conv.tokens[..70]).unwrap(), 0);
            first.append(&conv.tokens[..70]).unwrap();
            step_and_check(&pool, &layout, &[(&first, &conv, 0, 70)], allowed);
            first.commit(70).unwrap();
        }
        let second = pool.sequence_with(salt.as_bytes(), 0).unwrap();
        let cached = second.match_prefix(&conv.tokens).unwrap();
        assert_eq!(cached, 64);
        second.append(&conv.tokens[cached..]).unwrap();
        step_and_check(&pool, &layout, &[(&second, &conv, cached, 115 - cached)], allowed);
        second.commit(115).unwrap();
    }
    pool.check().unwrap();
}

#[test]
fn mixed_batch_with_unaligned_context_and_decode() {
    let mut rng = Rng(11);
    let (a, b, c) = (Conversation::new(&mut rng, 60), Conversation::new(&mut rng, 50), Conversation::new(&mut rng, 34));
    let pool = pool(32);
    let layout = strided_layout();
    let (sa, sb, sc) = (pool.sequence().unwrap(), pool.sequence().unwrap(), pool.sequence().unwrap());
    sa.append(&a.tokens).unwrap();
    sc.append(&c.tokens[..33]).unwrap();
    step_and_check(&pool, &layout, &[(&sa, &a, 0, 37), (&sc, &c, 0, 33)], &strided_allowed);
    sa.commit(37).unwrap();
    sc.commit(33).unwrap();
    sb.append(&b.tokens).unwrap();
    sc.append(&c.tokens[33..]).unwrap();
    step_and_check(&pool, &layout, &[(&sa, &a, 37, 23), (&sb, &b, 0, 50), (&sc, &c, 33, 1)], &strided_allowed);
}

#[test]
fn host_launch_checks() {
    let pool = pool(8);
    let seq = pool.sequence().unwrap();
    seq.append(&[1, 2, 3]).unwrap();
    let batch = pool.batch(&[&seq], &[3]).unwrap();
    let short = vec![0f32; 2 * HKV * D];
    assert_eq!(pool.kv_write_host(&batch, 0, &short, &short).unwrap_err().kind(), ErrorKind::ShapeMismatch);
    let halves = vec![bspa::bf16::from_bits(0); 3 * HKV * D];
    assert_eq!(pool.kv_write_host(&batch, 0, &halves, &halves).unwrap_err().kind(), ErrorKind::DtypeMismatch);
    let ok = vec![0f32; 3 * HKV * D];
    assert_eq!(pool.kv_write_host(&batch, 3, &ok, &ok).unwrap_err().kind(), ErrorKind::OutOfRange);
}

// f16 and bf16 (the half crate's types) through a CPU pool of that dtype: one token sees only
// itself, so each query head's output is its KV head's V row, element for element, and the
// pages hold the bits that were written.
fn one_token_round_trip<T: bspa::Element + PartialEq + std::fmt::Debug>(dtype: DType, of: fn(f32) -> T) {
    let mut pool = Pool::new(&PoolOptions {
        dtype,
        num_kv_heads: HKV as i32,
        head_dim: D as i32,
        page_size: PAGE,
        num_pages: 4,
        ..Default::default()
    })
    .unwrap();
    let k: Vec<T> = (0..HKV * D).map(|i| of(0.125 * i as f32 - 1.0)).collect();
    let v: Vec<T> = (0..HKV * D).map(|i| of(2.0 - 0.0625 * i as f32)).collect();
    let q: Vec<T> = (0..HQ * D).map(|i| of(0.5 - 0.03125 * i as f32)).collect();
    let mut out = vec![of(f32::NAN); HQ * D];
    let seq = pool.sequence().unwrap();
    seq.append(&[7]).unwrap();
    let layout = Layout::dense(HQ as i32).unwrap();
    {
        let batch = pool.batch(&[&seq], &[1]).unwrap();
        pool.kv_write_host(&batch, 0, &k, &v).unwrap();
        pool.prefill_host(&batch, 0, &layout, &q, &mut out, SCALE, None).unwrap();
    }
    for h in 0..HQ {
        let g = h / (HQ / HKV);
        assert_eq!(out[h * D..(h + 1) * D], v[g * D..(g + 1) * D], "{:?} head {}", dtype, h);
    }
    drop(seq);
    // Pages are [page][kv head][token][dim]: the token is token 0 of one page, whichever.
    let (kk, vv) = pool.kv_host::<T>(0).unwrap();
    let row = |pages: &[T], p: usize, g: usize| pages[(p * HKV + g) * PAGE as usize * D..][..D].to_vec();
    let pages = kk.len() / (HKV * PAGE as usize * D);
    let found = (0..pages).find(|&p| row(kk, p, 0) == k[..D]).expect("the written K row in the pages");
    for g in 0..HKV {
        assert_eq!(row(kk, found, g), k[g * D..(g + 1) * D]);
        assert_eq!(row(vv, found, g), v[g * D..(g + 1) * D]);
    }
}

#[test]
fn f16_and_bf16_elements_round_trip() {
    one_token_round_trip(DType::F16, bspa::f16::from_f32);
    one_token_round_trip(DType::BF16, bspa::bf16::from_f32);
    assert_eq!(bspa::bf16::from_f32(f32::from_bits(0x3f80_8000)).to_bits(), 0x3f80); // 1 + 2^-8: a tie, to even
    assert_eq!(bspa::f16::from_f32(65504.0).to_f32(), 65504.0);
}

#[test]
fn thread_safety_follows_the_header() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Pool>();
    send_sync::<bspa::Sequence<'static>>();
    send_sync::<Layout>();
    send::<bspa::Batch<'static>>();
    // Sequences of one pool appended from several threads at once.
    let pool = pool(64);
    let seqs: Vec<_> = (0..4).map(|_| pool.sequence().unwrap()).collect();
    std::thread::scope(|scope| {
        for (i, seq) in seqs.iter().enumerate() {
            scope.spawn(move || {
                for t in 0..10 {
                    seq.append(&[(i * 100 + t) as i32; 7]).unwrap();
                }
            });
        }
    });
    pool.check().unwrap();
    assert!(seqs.iter().all(|s| s.info().unwrap().num_tokens == 70));
}

// ---- Bring-your-own cache: prefill_paged / prefill_paged_host / prefill_workspace_bytes ----

/// The pool's K and V pages of `layer` as slices. The test runs no launch while it reads them.
fn pool_pages(pool: &Pool, layer: i32) -> (&[f32], &[f32], usize) {
    let (k, v) = unsafe { pool.kv(layer) }.expect("pool.kv");
    let shape = unsafe { std::slice::from_raw_parts(k.shape, k.ndim as usize) };
    assert_eq!(shape[1..], [HKV as i64, PAGE as i64, D as i64]);
    let numel = shape.iter().product::<i64>() as usize;
    let slices = unsafe {
        (
            std::slice::from_raw_parts(k.data as *const f32, numel),
            std::slice::from_raw_parts(v.data as *const f32, numel),
        )
    };
    (slices.0, slices.1, shape[0] as usize)
}

#[allow(clippy::too_many_arguments)]
fn paged_args<'a>(
    q: &'a [f32],
    out: &'a mut [f32],
    lse: Option<&'a mut [f32]>,
    k: &'a [f32],
    v: &'a [f32],
    block_table: &'a [i32],
    query_starts: &'a [i32],
    context_lens: &'a [i32],
    layout: &'a Layout,
) -> bspa::HostPagedArgs<'a, f32> {
    bspa::HostPagedArgs {
        q,
        out,
        lse,
        k_pages: k,
        v_pages: v,
        num_kv_heads: HKV,
        page_size: PAGE as usize,
        head_dim: D,
        block_table,
        query_starts,
        context_lens,
        layout,
        scale: SCALE,
        workspace: None,
    }
}

#[test]
fn prefill_paged_over_the_pools_pages_matches_prefill() {
    let mut rng = Rng(3);
    let conv = Conversation::new(&mut rng, 90);
    let pool = pool(32);
    let layout = strided_layout();
    let seq = pool.sequence().unwrap();
    seq.append(&conv.tokens).unwrap();
    step(&pool, &layout, &[(&seq, &conv, 0, 41)]);
    seq.commit(41).unwrap();
    let (expected, expected_lse) = step(&pool, &layout, &[(&seq, &conv, 41, 49)]);
    let q = &conv.q[41 * HQ * D..];
    let (block_table, query_starts, context_lens) = (seq.pages().unwrap(), [0, 49], [41]);
    assert_eq!(block_table.len(), 6);

    // Safe form over slices of the pool's pages.
    let (k, v, _) = pool_pages(&pool, 0);
    let mut out = vec![f32::NAN; q.len()];
    let mut lse = vec![f32::NAN; HQ * 49];
    bspa::prefill_paged_host(paged_args(
        q,
        &mut out,
        Some(&mut lse),
        k,
        v,
        &block_table,
        &query_starts,
        &context_lens,
        &layout,
    ))
    .unwrap();
    let as_f64 = |x: &[f32]| x.iter().map(|&e| e as f64).collect::<Vec<f64>>();
    assert!(rel_l2(&out, &as_f64(&expected)) <= 1e-6, "{:e}", rel_l2(&out, &as_f64(&expected)));
    assert!(rel_l2(&lse, &as_f64(&expected_lse)) <= 1e-6);
    check_rows(&out, &lse, &[(&conv, 41, 49)], &strided_allowed);

    // Raw form over the pool's own DLTensor views.
    let (tk, tv) = unsafe { pool.kv(0) }.unwrap();
    let mut raw_out = vec![f32::NAN; q.len()];
    let (mut sq, mut sout, mut sbt, mut sqs, mut scl) =
        ([49, HQ as i64, D as i64], [49, HQ as i64, D as i64], [1, block_table.len() as i64], [2], [1]);
    let tq = host_tensor(q.as_ptr(), bspa::sys::kDLFloat, 32, &mut sq);
    let mut tout = host_tensor(raw_out.as_mut_ptr(), bspa::sys::kDLFloat, 32, &mut sout);
    let tbt = host_tensor(block_table.as_ptr(), bspa::sys::kDLInt, 32, &mut sbt);
    let tqs = host_tensor(query_starts.as_ptr(), bspa::sys::kDLInt, 32, &mut sqs);
    let tcl = host_tensor(context_lens.as_ptr(), bspa::sys::kDLInt, 32, &mut scl);
    let args = bspa::PagedArgs {
        q: &tq,
        out: &mut tout,
        lse: None,
        k_pages: &tk,
        v_pages: &tv,
        block_table: &tbt,
        query_starts: &tqs,
        context_lens: &tcl,
        max_query_len: 49,
        layout: &layout,
        scale: SCALE,
        workspace: None,
        k_scale: None,
        v_scale: None,
        max_decode_query_len: 0,
    };
    unsafe { bspa::prefill_paged(args, std::ptr::null_mut()) }.unwrap();
    assert!(rel_l2(&raw_out, &as_f64(&expected)) <= 1e-6);
}

#[test]
fn prefill_paged_over_own_pages_with_a_shuffled_block_table_matches_the_reference() {
    let mut rng = Rng(21);
    let convs = [Conversation::new(&mut rng, 60), Conversation::new(&mut rng, 50), Conversation::new(&mut rng, 34)];
    // (context, query rows) per sequence: a chunk after an unaligned prefix, a whole
    // prompt, a decode row.
    let work = [(37usize, 23usize), (0, 50), (33, 1)];
    let (num_pages, max_pages) = (16usize, 4usize);
    // Pages in a shuffled order (Fisher-Yates), handed out to the sequences in turn.
    let mut order: Vec<i32> = (0..num_pages as i32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let page_elems = HKV * PAGE as usize * D;
    // Unused slots hold large values: reading one would spoil the result.
    let mut k: Vec<f32> = rng.normals(num_pages * page_elems).iter().map(|x| x * 100.0).collect();
    let mut v: Vec<f32> = rng.normals(num_pages * page_elems).iter().map(|x| x * 100.0).collect();
    let mut block_table = vec![0i32; work.len() * max_pages];
    let (mut query_starts, mut context_lens, mut q) = (vec![0i32], Vec::new(), Vec::new());
    let mut next = order.into_iter();
    for (s, (c, &(ctx, n))) in convs.iter().zip(&work).enumerate() {
        let tokens = ctx + n;
        for j in 0..(tokens + PAGE as usize - 1) / PAGE as usize {
            block_table[s * max_pages + j] = next.next().unwrap();
        }
        for t in 0..tokens {
            let page = block_table[s * max_pages + t / PAGE as usize] as usize;
            for h in 0..HKV {
                let dst = ((page * HKV + h) * PAGE as usize + t % PAGE as usize) * D;
                k[dst..dst + D].copy_from_slice(&c.k[(t * HKV + h) * D..(t * HKV + h + 1) * D]);
                v[dst..dst + D].copy_from_slice(&c.v[(t * HKV + h) * D..(t * HKV + h + 1) * D]);
            }
        }
        q.extend_from_slice(&c.q[ctx * HQ * D..(ctx + n) * HQ * D]);
        query_starts.push(query_starts.last().unwrap() + n as i32);
        context_lens.push(ctx as i32);
    }
    let layout = strided_layout();
    let mut out = vec![f32::NAN; q.len()];
    let mut lse = vec![f32::NAN; HQ * 74];
    bspa::prefill_paged_host(paged_args(
        &q,
        &mut out,
        Some(&mut lse),
        &k,
        &v,
        &block_table,
        &query_starts,
        &context_lens,
        &layout,
    ))
    .unwrap();
    let rows: Vec<(&Conversation, usize, usize)> = convs.iter().zip(&work).map(|(c, &(ctx, n))| (c, ctx, n)).collect();
    check_rows(&out, &lse, &rows, &strided_allowed);
}

#[test]
fn prefill_workspace_bytes_on_cpu_is_zero() {
    assert_eq!(bspa::prefill_workspace_bytes(bspa::Device::Cpu, D as i32).unwrap(), 0);
    assert_eq!(bspa::prefill_workspace_bytes(bspa::Device::Cpu, 128).unwrap(), 0);
    let err = bspa::prefill_workspace_bytes(bspa::Device::Cpu, 0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.message().contains("bspa_prefill_workspace_bytes") && err.message().contains("head_dim = 0"),
        "{}",
        err
    );
    if bspa::cuda_device_count().unwrap() == 0 {
        let err = bspa::prefill_workspace_bytes(bspa::Device::Cuda(0), 128).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NoDevice, "{}", err);
    }
}

/// `n` bytes starting `offset` bytes past a 16-byte boundary, within `buf`.
fn aligned_bytes(buf: &mut [u8], n: usize, offset: usize) -> &mut [u8] {
    let start = (16 - buf.as_ptr() as usize % 16) % 16 + offset;
    &mut buf[start..start + n]
}

#[test]
fn prefill_paged_with_a_cpu_workspace_matches_without() {
    let mut rng = Rng(5);
    let conv = Conversation::new(&mut rng, 75);
    let pool = pool(32);
    let layout = strided_layout();
    let seq = pool.sequence().unwrap();
    seq.append(&conv.tokens).unwrap();
    step(&pool, &layout, &[(&seq, &conv, 0, 75)]);
    let (k, v, _) = pool_pages(&pool, 0);
    let (block_table, query_starts, context_lens) = (seq.pages().unwrap(), [0, 30], [45]);
    let q = &conv.q[45 * HQ * D..];
    let run = |workspace: Option<&mut [u8]>| {
        let mut out = vec![f32::NAN; q.len()];
        let mut args = paged_args(q, &mut out, None, k, v, &block_table, &query_starts, &context_lens, &layout);
        args.workspace = workspace;
        bspa::prefill_paged_host(args).map(|()| out)
    };
    let expected = run(None).unwrap();
    let (ref_out, _) = reference(&conv, 45, 30, &strided_allowed);
    assert!(rel_l2(&expected, &ref_out) <= 1e-5);
    let mut buf = vec![0u8; 4096 + 32];
    assert_eq!(run(Some(aligned_bytes(&mut buf, 4096, 0))).unwrap(), expected);
    assert_eq!(run(Some(&mut [])).unwrap(), expected); // empty: no workspace
                                                       // The workspace reaches the library: a misaligned one is refused.
    let err = run(Some(aligned_bytes(&mut buf, 4096, 1))).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("workspace") && err.message().contains("16-byte aligned"), "{}", err);
}

#[test]
fn prefill_paged_errors_carry_the_librarys_message() {
    let mut rng = Rng(9);
    let layout = Layout::dense(HQ as i32).unwrap();
    let (k, v) = (rng.normals(4 * HKV * PAGE as usize * D), rng.normals(4 * HKV * PAGE as usize * D));
    let q = rng.normals(20 * HQ * D);
    let mut out = vec![0f32; q.len()];

    // A page id past the pages: checked by the library on the CPU.
    let err =
        bspa::prefill_paged_host(paged_args(&q, &mut out, None, &k, &v, &[0, 4], &[0, 20], &[0], &layout)).unwrap_err();
    assert_eq!((err.kind(), err.category()), (ErrorKind::OutOfRange, 1));
    assert!(
        err.message().starts_with("bspa_prefill_paged: ") && err.message().contains("block_table[0][1] = 4"),
        "{}",
        err
    );
    assert!(err.to_string().starts_with("BSPA_ERR_OUT_OF_RANGE: "));
    // q rows that no sequence owns.
    let err =
        bspa::prefill_paged_host(paged_args(&q, &mut out, None, &k, &v, &[0, 1], &[0, 19], &[0], &layout)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfRange);
    assert!(err.message().contains("query_starts[1] = 19"), "{}", err);
    // Slices that do not fit the shapes are refused before the call.
    let err = bspa::prefill_paged_host(paged_args(&q, &mut out, None, &k, &v[1..], &[0, 1], &[0, 20], &[0], &layout))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ShapeMismatch);
    assert!(err.message().contains("v_pages"), "{}", err);

    // Raw tensors: mismatched K and V shapes, an int32 tensor of the wrong dtype.
    let (mut sq, mut sout, mut sk, mut sv, mut sbt, mut sqs, mut scl) = (
        [20, HQ as i64, D as i64],
        [20, HQ as i64, D as i64],
        [4, HKV as i64, PAGE as i64, D as i64],
        [2, HKV as i64, PAGE as i64, 2 * D as i64],
        [1i64, 2],
        [2i64],
        [1i64],
    );
    let (bt, qs, cl) = ([0i32, 1], [0i32, 20], [0i32]);
    let tq = host_tensor(q.as_ptr(), bspa::sys::kDLFloat, 32, &mut sq);
    let mut tout = host_tensor(out.as_mut_ptr(), bspa::sys::kDLFloat, 32, &mut sout);
    let tk = host_tensor(k.as_ptr(), bspa::sys::kDLFloat, 32, &mut sk);
    let tv = host_tensor(v.as_ptr(), bspa::sys::kDLFloat, 32, &mut sv);
    let tbt = host_tensor(bt.as_ptr(), bspa::sys::kDLInt, 32, &mut sbt);
    let tqs = host_tensor(qs.as_ptr(), bspa::sys::kDLInt, 32, &mut sqs);
    let tcl = host_tensor(cl.as_ptr(), bspa::sys::kDLInt, 32, &mut scl);
    // The raw call, with the v_pages and block_table under test.
    let raw = |tv: &bspa::sys::DLTensor, tbt: &bspa::sys::DLTensor, tout: &mut bspa::sys::DLTensor| unsafe {
        bspa::prefill_paged(
            bspa::PagedArgs {
                q: &tq,
                out: tout,
                lse: None,
                k_pages: &tk,
                v_pages: tv,
                block_table: tbt,
                query_starts: &tqs,
                context_lens: &tcl,
                max_query_len: 20,
                layout: &layout,
                scale: SCALE,
                workspace: None,
                k_scale: None,
                v_scale: None,
                max_decode_query_len: 0,
            },
            std::ptr::null_mut(),
        )
    };
    let err = raw(&tv, &tbt, &mut tout).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ShapeMismatch);
    assert!(err.message().starts_with("bspa_prefill_paged: v_pages.shape = [2, 2, 16, 32]"), "{}", err);
    // V with K's (right) shape, and a uint32 block table.
    let tv_ok = host_tensor(v.as_ptr(), bspa::sys::kDLFloat, 32, &mut sk);
    let tbt_u32 = host_tensor(bt.as_ptr(), bspa::sys::kDLUInt, 32, &mut sbt);
    let err = raw(&tv_ok, &tbt_u32, &mut tout).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DtypeMismatch);
    assert!(err.message().contains("block_table.dtype = uint32"), "{}", err);
}

#[test]
fn kv_host_reads_what_kv_write_wrote_and_refuses_another_dtype() {
    let mut pool = pool(4);
    let tokens: Vec<i32> = (0..20).collect();
    let k: Vec<f32> = (0..20 * HKV * D).map(|i| i as f32).collect();
    {
        let seq = pool.sequence().unwrap();
        seq.append(&tokens).unwrap();
        let batch = pool.batch(&[&seq], &[20]).unwrap();
        pool.kv_write_host(&batch, 0, &k, &k).unwrap();
        let pages = seq.pages().unwrap();
        drop(batch);
        seq.commit(20).unwrap();
        drop(seq);
        // Token 17 (page 1, slot 1), head 1: the slices borrow `pool` mutably, which the
        // compiler allows only now that the sequence and batch are gone.
        let (kk, vv) = pool.kv_host::<f32>(0).unwrap();
        let at = ((pages[1] as usize * HKV + 1) * PAGE as usize + 1) * D;
        assert_eq!(kk[at..at + D], k[(17 * HKV + 1) * D..(17 * HKV + 2) * D]);
        assert_eq!(kk.len(), vv.len());
    }
    let err = pool.kv_host::<bspa::bf16>(0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DtypeMismatch);
}

#[test]
fn default_options_make_a_usable_cpu_pool() {
    let pool = Pool::new(&PoolOptions { num_kv_heads: 2, head_dim: 64, ..Default::default() }).unwrap();
    assert_eq!(pool.options().dtype, DType::F32);
    // 256 MiB over K and V pages of 2 heads x 64 tokens x 64 dims x 4 bytes.
    assert_eq!(pool.stats().unwrap().pages_total, (bspa::DEFAULT_MEMORY_BYTES / (2 * 2 * 64 * 64 * 4)) as i64);
    let cuda = PoolOptions::cuda(1);
    assert_eq!((cuda.device, cuda.dtype), (bspa::Device::Cuda(1), DType::BF16));
}

//! The safe crate on the CPU backend: prefix hits, errors, and the prefill against a
//! float64 reference built from the token-level mask (DESIGN.md §2).

use bspa::{DType, ErrorKind, Layout, Pool, PoolOptions, StridedOptions};

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
        Conversation { tokens: rng.tokens(len), q: rng.normals(len * HQ * D), k: rng.normals(len * HKV * D), v: rng.normals(len * HKV * D) }
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

/// One batch over `work` = [(sequence, conversation, ctx, q)]: kv_write, prefill, check
/// every sequence's rows against the reference.
fn step_and_check(pool: &Pool, layout: &Layout, work: &[(&bspa::Sequence, &Conversation, usize, usize)],
                  allowed: &dyn Fn(i64, i64, i64) -> bool) {
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
    let mut row = 0;
    for &(_, c, ctx, n) in work {
        let (ref_out, ref_lse) = reference(c, ctx, n, allowed);
        let got = &out[row * HQ * D..(row + n) * HQ * D];
        let err = rel_l2(got, &ref_out);
        assert!(err <= 1e-5, "ctx {} q {}: relative L2 error {:e}", ctx, n, err);
        let got_lse: Vec<f32> = (0..HQ).flat_map(|h| lse[h * total + row..h * total + row + n].to_vec()).collect();
        assert!(rel_l2(&got_lse, &ref_lse) <= 1e-5, "lse of ctx {} q {}", ctx, n);
        row += n;
    }
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
                assert_eq!(layout.allowed(h as i32, qb, kb).unwrap(), strided_allowed(h, qb, kb), "{} {} {}", h, qb, kb);
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
    let halves = vec![bspa::BF16Bits(0); 3 * HKV * D];
    assert_eq!(pool.kv_write_host(&batch, 0, &halves, &halves).unwrap_err().kind(), ErrorKind::DtypeMismatch);
    let ok = vec![0f32; 3 * HKV * D];
    assert_eq!(pool.kv_write_host(&batch, 3, &ok, &ok).unwrap_err().kind(), ErrorKind::OutOfRange);
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

//! Reusable batches on a CPU pool: steps planned into one batch compute bitwise what
//! one-step batches compute (with and without fixed launch shapes), refusals keep the
//! previous plan, option errors, and the previous plan's pages released on re-planning.

use bspa::{BatchOptions, DType, ErrorKind, Layout, Pool, PoolOptions, StridedOptions};

const HQ: usize = 4;
const HKV: usize = 2;
const D: usize = 16;
const MAX_TOKENS: i64 = 64;

fn pool() -> Pool {
    Pool::new(&PoolOptions {
        dtype: DType::F32,
        num_kv_heads: HKV as i32,
        head_dim: D as i32,
        page_size: 16,
        num_pages: 128,
        ..Default::default()
    })
    .expect("pool")
}

fn options(fixed: bool) -> BatchOptions {
    BatchOptions {
        max_seqs: 4,
        max_tokens: MAX_TOKENS,
        max_seq_tokens: 300,
        max_query_len: 40,
        fixed_launch_shape: fixed,
        max_decode_query_len: 0,
    }
}

/// SplitMix64 plus Box-Muller.
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn normals(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let u = ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                let v = ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
            })
            .collect()
    }
    fn tokens(&mut self, n: usize) -> Vec<i32> {
        (0..n).map(|_| (self.next_u64() % 50000) as i32).collect()
    }
}

/// kv_write and prefill of a step's `t` rows through `batch`, padded to `batch.rows()`;
/// returns out and lse of every row (the padding poisoned).
fn launch(
    pool: &Pool,
    batch: &bspa::Batch<'_>,
    layout: &Layout,
    q: &[f32],
    k: &[f32],
    v: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let rows = batch.rows();
    let pad = |x: &[f32], heads: usize| {
        let mut p = x.to_vec();
        p.resize(rows * heads * D, 0.0);
        p
    };
    let mut out = vec![1234.5f32; rows * HQ * D];
    let mut lse = vec![-77f32; HQ * rows];
    pool.kv_write_host(batch, 0, &pad(k, HKV), &pad(v, HKV)).expect("kv_write");
    pool.prefill_host(batch, 0, layout, &pad(q, HQ), &mut out, 0.25, Some(&mut lse)).expect("prefill");
    (out, lse)
}

fn decode_loop(fixed: bool) {
    let mut rng = Rng(11);
    let pool = pool();
    let layout = Layout::strided(&StridedOptions {
        num_heads: HQ as i32,
        block_size: 16,
        local_blocks: 2,
        vert_stride: 3,
        ..Default::default()
    })
    .expect("layout");
    let mut batch = pool.reusable_batch(&options(fixed)).expect("reusable batch");
    assert!(!batch.is_planned());
    let mut seqs = Vec::new();
    for n in [37, 5, 20] {
        let s = pool.sequence().unwrap();
        s.append(&rng.tokens(n)).unwrap();
        seqs.push(s);
    }
    for step in 0..8 {
        if step == 4 {
            // One finishes (dropped while the plan still holds it), one joins.
            let s = pool.sequence().unwrap();
            s.append(&rng.tokens(11)).unwrap();
            drop(std::mem::replace(&mut seqs[1], s));
        }
        if step == 5 {
            let s = pool.sequence().unwrap();
            s.append(&rng.tokens(3)).unwrap();
            seqs.push(s);
        }
        let mut lens = Vec::new();
        for s in &seqs {
            let i = s.info().unwrap();
            if i.num_tokens == i.num_computed {
                s.append(&rng.tokens(1)).unwrap();
            }
            let i = s.info().unwrap();
            lens.push((i.num_tokens - i.num_computed) as i32);
        }
        let t: usize = lens.iter().map(|&l| l as usize).sum();
        let (q, k, v) = (rng.normals(t * HQ * D), rng.normals(t * HKV * D), rng.normals(t * HKV * D));
        let refs: Vec<&bspa::Sequence<'_>> = seqs.iter().collect();
        let (want_out, want_lse) = {
            let one = pool.batch(&refs, &lens).unwrap();
            launch(&pool, &one, &layout, &q, &k, &v)
        };
        batch.plan(&refs, &lens).expect("plan");
        assert_eq!(batch.num_tokens(), t);
        assert_eq!(batch.rows(), if fixed { MAX_TOKENS as usize } else { t });
        let (out, lse) = launch(&pool, &batch, &layout, &q, &k, &v);
        let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out[..t * HQ * D]), bits(&want_out), "step {}: outputs differ", step);
        let rows = batch.rows();
        for h in 0..HQ {
            assert_eq!(bits(&lse[h * rows..h * rows + t]), bits(&want_lse[h * t..(h + 1) * t]), "step {}: lse", step);
            assert!(lse[h * rows + t..(h + 1) * rows].iter().all(|&x| x == -77.0), "lse past the step written");
        }
        assert!(out[t * HQ * D..].iter().all(|&x| x == 1234.5), "rows past the step written");
        for (s, &l) in seqs.iter().zip(&lens) {
            let i = s.info().unwrap();
            s.commit(i.num_computed as usize + l as usize).unwrap();
        }
        pool.check().unwrap();
    }
}

#[test]
fn steps_of_one_reusable_batch_equal_one_step_batches() {
    decode_loop(false);
}

#[test]
fn fixed_shape_steps_equal_one_step_batches() {
    decode_loop(true);
}

#[test]
fn a_refused_plan_keeps_the_previous_plan() {
    let mut rng = Rng(5);
    let pool = pool();
    let layout = Layout::dense(HQ as i32).unwrap();
    let mut batch = pool.reusable_batch(&BatchOptions { max_seqs: 2, ..options(false) }).unwrap();
    let (q, k) = (rng.normals(8 * HQ * D), rng.normals(8 * HKV * D));
    let mut out = vec![0f32; 8 * HQ * D];
    let err = pool.prefill_host(&batch, 0, &layout, &q, &mut out, 0.25, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ShapeMismatch, "{}", err); // 0 rows before any plan
    let seqs: Vec<_> = (0..3).map(|_| pool.sequence().unwrap()).collect();
    seqs[0].append(&rng.tokens(8)).unwrap();
    seqs[1].append(&rng.tokens(1)).unwrap();
    seqs[2].append(&rng.tokens(1)).unwrap();
    let refs: Vec<_> = seqs.iter().collect();
    batch.plan(&refs[..1], &[8]).unwrap();
    pool.kv_write_host(&batch, 0, &k, &k).unwrap();
    pool.prefill_host(&batch, 0, &layout, &q, &mut out, 0.25, None).unwrap();
    let first = out.clone();
    let before = pool.stats().unwrap();
    let err = batch.plan(&refs, &[8, 1, 1]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfRange, "{}", err);
    assert!(err.message().contains("max_seqs"), "{}", err);
    let err = batch.plan(&[refs[0], refs[0]], &[8, 8]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
    let err = batch.plan(&refs[..2], &[8]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
    assert_eq!(pool.stats().unwrap(), before, "a refused plan changed the pool");
    assert_eq!(batch.num_tokens(), 8);
    out.iter_mut().for_each(|x| *x = f32::NAN);
    pool.prefill_host(&batch, 0, &layout, &q, &mut out, 0.25, None).unwrap();
    assert_eq!(
        out.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
        first.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
    );
    pool.check().unwrap();
}

#[test]
fn unplanned_launches_are_invalid_state() {
    let pool = pool();
    let batch = pool.reusable_batch(&BatchOptions { fixed_launch_shape: true, ..options(false) }).unwrap();
    assert_eq!(batch.rows(), 0);
    // Tensors of max_tokens rows through the raw launch: refused for want of a plan.
    let k = vec![0f32; MAX_TOKENS as usize * HKV * D];
    let mut shape = [MAX_TOKENS, HKV as i64, D as i64];
    let t = bspa::sys::DLTensor {
        data: k.as_ptr() as *mut _,
        device: bspa::sys::DLDevice { device_type: bspa::sys::kDLCPU, device_id: 0 },
        ndim: 3,
        dtype: bspa::sys::DLDataType { code: bspa::sys::kDLFloat as u8, bits: 32, lanes: 1 },
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let err = unsafe { pool.kv_write(&batch, 0, &t, &t, std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{}", err);
}

#[test]
fn option_errors_name_the_limit() {
    let pool = pool();
    let err = pool.reusable_batch(&BatchOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("max_seqs"), "{}", err);
    let err = pool.reusable_batch(&BatchOptions { max_query_len: 65, ..options(false) }).unwrap_err();
    assert!(err.message().contains("max_query_len = 65"), "{}", err);
    let err = pool.reusable_batch(&BatchOptions { max_decode_query_len: -1, ..options(false) }).unwrap_err();
    assert!(err.message().contains("max_decode_query_len = -1"), "{}", err);
    let bounded = pool.reusable_batch(&BatchOptions { max_decode_query_len: 1, ..options(true) }).unwrap();
    assert_eq!(bounded.options().max_decode_query_len, 1);
    drop(bounded);
    let err = pool.reusable_batch(&BatchOptions { max_seq_tokens: 0, ..options(false) }).unwrap_err();
    assert!(err.message().contains("max_seq_tokens"), "{}", err);
    let b = pool.reusable_batch(&BatchOptions { max_query_len: 0, ..options(false) }).unwrap();
    assert_eq!(b.options().max_query_len, MAX_TOKENS as i32);
    let other = self::pool();
    let stranger = other.sequence().unwrap();
    stranger.append(&[1, 2]).unwrap();
    let mut b = b;
    let err = b.plan(&[&stranger], &[2]).unwrap_err();
    assert!(err.message().contains("another pool"), "{}", err);
}

#[test]
fn replanning_releases_the_previous_pages_and_cpu_pools_allocate_no_device_memory() {
    let before = bspa::device_allocation_counts().unwrap();
    let pool = pool();
    let mut batch = pool.reusable_batch(&options(false)).unwrap();
    let s = pool.sequence().unwrap();
    s.append(&(0..40).collect::<Vec<_>>()).unwrap(); // 3 pages
    batch.plan(&[&s], &[40]).unwrap();
    drop(s); // the plan holds its pages
    assert_eq!(pool.stats().unwrap().pages_in_use, 3);
    let t = pool.sequence().unwrap();
    t.append(&[7]).unwrap();
    batch.plan(&[&t], &[1]).unwrap();
    assert_eq!(pool.stats().unwrap().pages_in_use, 1, "the previous plan's pages are still held");
    drop(batch);
    assert_eq!(bspa::device_allocation_counts().unwrap(), before, "a CPU pool made device allocations");
}

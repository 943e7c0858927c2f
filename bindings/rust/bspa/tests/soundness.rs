//! What safe code must not reach: a data race on the pool's pages.
//!
//! The header leaves ordering to the caller: "launches that write pages (bspa_kv_write) and
//! launches that read them (another batch over the same sequence, or over pages a commit
//! shared with another sequence) are ordered by the caller ... on the CPU, overlapping ones
//! race". Safe code reaches that with two batches over one sequence on two threads (a pool
//! and its sequences are `Sync`), so the safe launches must order them themselves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bspa::{DType, Layout, Pool, PoolOptions};

const D: usize = 64;
const N: usize = 256;

/// One thread writes the sequence's V pages (all 1, then all 2, ...) through one batch while
/// another runs the prefill over the same pages through a second batch. With q = 0 every
/// output row is the mean of the V rows it sees: 1 or 2 when each launch sees one write
/// whole, something between when a write lands in the middle of a prefill (a data race).
#[test]
fn host_launches_of_two_batches_over_one_sequence_do_not_race() {
    let pool = Pool::new(&PoolOptions {
        dtype: DType::F32,
        num_kv_heads: 1,
        head_dim: D as i32,
        page_size: 16,
        num_pages: (N / 16) as i64,
        ..Default::default()
    })
    .unwrap();
    let seq = pool.sequence().unwrap();
    seq.append(&(0..N as i32).collect::<Vec<_>>()).unwrap();
    let layout = Layout::dense(1).unwrap();
    let k = vec![0f32; N * D];
    let (ones, twos) = (vec![1f32; N * D], vec![2f32; N * D]);
    {
        let batch = pool.batch(&[&seq], &[N as i32]).unwrap();
        pool.kv_write_host(&batch, 0, &k, &ones).unwrap();
    }
    let done = AtomicBool::new(false);
    let torn = std::thread::scope(|scope| {
        scope.spawn(|| {
            let batch = pool.batch(&[&seq], &[N as i32]).unwrap();
            let mut i = 0usize;
            while !done.load(Ordering::Relaxed) {
                pool.kv_write_host(&batch, 0, &k, if i % 2 == 0 { &twos } else { &ones }).unwrap();
                i += 1;
                std::thread::yield_now();
            }
        });
        let batch = pool.batch(&[&seq], &[N as i32]).unwrap();
        let q = vec![0f32; N * D];
        let mut out = vec![0f32; N * D];
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut torn = None;
        while torn.is_none() && Instant::now() < deadline {
            let result = pool.prefill_host(&batch, 0, &layout, &q, &mut out, 1.0, None);
            if let Err(e) = result {
                done.store(true, Ordering::Relaxed);
                panic!("prefill_host: {}", e);
            }
            torn = out.iter().position(|&x| (x - 1.0).abs() > 1e-3 && (x - 2.0).abs() > 1e-3).map(|i| (i, out[i]));
        }
        done.store(true, Ordering::Relaxed);
        torn
    });
    assert!(torn.is_none(), "a prefill saw a write in progress: out[{}] = {}", torn.unwrap().0, torn.unwrap().1);
}

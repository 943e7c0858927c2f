//! FP8 (e4m3) pools through the safe crate on the CPU backend: scales, their errors, the
//! quantization of known values on write, the dequantization by the prefill, capacity.

mod common;

use bspa::{bf16, DType, ErrorKind, Layout, Pool, PoolOptions};
use common::host_tensor;

const HKV: i32 = 2;
const D: i32 = 16;
const PAGE: i32 = 16;

fn fp8_pool(num_pages: i64, memory_bytes: u64) -> Pool {
    Pool::new(&PoolOptions {
        dtype: DType::Fp8E4m3,
        num_layers: 2,
        num_kv_heads: HKV,
        head_dim: D,
        page_size: PAGE,
        num_pages,
        memory_bytes,
        ..Default::default()
    })
    .expect("fp8 pool")
}

#[test]
fn scales_round_trip_and_errors() {
    let pool = fp8_pool(8, 0);
    assert_eq!(pool.kv_scales(0).unwrap_err().kind(), ErrorKind::InvalidState);
    pool.set_kv_scales(1, &[0.5, 0.25], &[1.0, 2.0]).unwrap();
    assert_eq!(pool.kv_scales(1).unwrap(), (vec![0.5, 0.25], vec![1.0, 2.0]));
    for bad in [f32::NAN, f32::INFINITY, 0.0, -1.0] {
        let e = pool.set_kv_scales(1, &[0.5, bad], &[1.0, 1.0]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("k_scales[1]") && e.message().contains("layer 1"), "{}", e.message());
    }
    assert_eq!(pool.set_kv_scales(1, &[1.0; 3], &[1.0; 3]).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(pool.set_kv_scales(1, &[1.0; 2], &[1.0; 3]).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(pool.set_kv_scales(2, &[1.0; 2], &[1.0; 2]).unwrap_err().kind(), ErrorKind::OutOfRange);
    assert_eq!(pool.kv_scales(1).unwrap().0, vec![0.5, 0.25]);
    let info = pool.info().unwrap();
    assert_eq!((info.dtype, info.kv_scales_layers), (DType::Fp8E4m3, 1));
    let bf16 = Pool::new(&PoolOptions {
        dtype: DType::BF16,
        num_kv_heads: HKV,
        head_dim: D,
        page_size: PAGE,
        num_pages: 4,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(bf16.set_kv_scales(0, &[1.0; 2], &[1.0; 2]).unwrap_err().kind(), ErrorKind::InvalidState);
}

#[test]
fn a_byte_budget_holds_twice_the_pages() {
    let f8 = fp8_pool(0, 1 << 20);
    let b16 = Pool::new(&PoolOptions {
        dtype: DType::BF16,
        num_layers: 2,
        num_kv_heads: HKV,
        head_dim: D,
        page_size: PAGE,
        num_pages: 0,
        memory_bytes: 1 << 20,
        ..Default::default()
    })
    .unwrap();
    let (a, b) = (f8.info().unwrap(), b16.info().unwrap());
    assert_eq!(a.page_bytes * 2, b.page_bytes);
    assert_eq!(a.num_pages, 2 * b.num_pages);
    assert!(bspa::build_info().contains("fp8_e4m3"));
}

#[test]
fn write_quantizes_and_prefill_dequantizes() {
    let mut pool = fp8_pool(8, 0);
    let values = [1.0f32, -0.5, 448.0, 1000.0, -3.5, 0.0, 2.0f32.powi(-9), 1.0625];
    let codes = [0x38u8, 0xb0, 0x7e, 0x7e, 0xc6, 0x00, 0x01, 0x38];
    let mut v = vec![bf16::from_f32(0.0); (HKV * D) as usize];
    for (i, x) in values.iter().enumerate() {
        v[i] = bf16::from_f32(*x);
    }
    let k = vec![bf16::from_f32(0.0); (HKV * D) as usize];
    let q = vec![bf16::from_f32(0.25); (4 * D) as usize];
    let mut out = vec![bf16::from_f32(f32::NAN); (4 * D) as usize];
    let layout = Layout::dense(4).unwrap();
    {
        let seq = pool.sequence().unwrap();
        seq.append(&[7]).unwrap();
        let batch = pool.batch(&[&seq], &[1]).unwrap();
        let e = pool.kv_write_host(&batch, 0, &k, &v).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidState, "{}", e.message());
        pool.set_kv_scales(0, &[1.0, 1.0], &[1.0, 0.5]).unwrap();
        pool.kv_write_host(&batch, 0, &k, &v).unwrap();
        pool.prefill_host(&batch, 0, &layout, &q, &mut out, 0.1, None).unwrap();
    }
    // One key: each output row is V of its KV head (heads 0, 1 read KV head 0), exactly.
    for (i, x) in values.iter().enumerate() {
        let want = if *x >= 448.0 {
            448.0
        } else if *x == 1.0625 {
            1.0
        } else {
            *x
        };
        assert_eq!(out[i].to_f32(), want, "element {}", i);
    }
    let (_, vb) = pool.kv_host_fp8(0).unwrap();
    assert_eq!(&vb[..codes.len()], &codes[..]);
    assert_eq!(pool.kv_host::<bf16>(0).unwrap_err().kind(), ErrorKind::DtypeMismatch);
}

/// Bring-your-own e4m3 pages: `prefill_paged` over the fp8 pool's own pages and scales gives
/// the pool's prefill, byte for byte, whatever `max_decode_query_len` says (a CUDA routing
/// hint); a negative bound, or pages without their scales, are refused.
#[test]
fn prefill_paged_over_e4m3_pages_with_scales_matches_the_pool() {
    const HQ: i32 = 4;
    const T: usize = 21;
    let pool = fp8_pool(8, 0);
    pool.set_kv_scales(0, &[0.5, 2.0], &[0.25, 1.5]).unwrap();
    let mut rng = 12345u64;
    let mut normal = || {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        bf16::from_f32(((rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0)
    };
    let k: Vec<bf16> = (0..T * (HKV * D) as usize).map(|_| normal()).collect();
    let v: Vec<bf16> = (0..T * (HKV * D) as usize).map(|_| normal()).collect();
    let q: Vec<bf16> = (0..T * (HQ * D) as usize).map(|_| normal()).collect();
    let layout = Layout::dense(HQ).unwrap();
    let mut expected = vec![bf16::from_f32(f32::NAN); q.len()];
    let seq = pool.sequence().unwrap();
    seq.append(&(0..T as i32).collect::<Vec<_>>()).unwrap();
    {
        let batch = pool.batch(&[&seq], &[T as i32]).unwrap();
        pool.kv_write_host(&batch, 0, &k, &v).unwrap();
        pool.prefill_host(&batch, 0, &layout, &q, &mut expected, 0.25, None).unwrap();
    }
    let (tk, tv) = unsafe { pool.kv(0) }.unwrap();
    let (ks, vs) = pool.kv_scales(0).unwrap();
    let pages = seq.pages().unwrap();
    let (qs, cl) = ([0i32, T as i32], [0i32]);
    let (mut sq, mut so, mut sbt, mut sqs, mut scl, mut sks, mut svs) = (
        [T as i64, HQ as i64, D as i64],
        [T as i64, HQ as i64, D as i64],
        [1, pages.len() as i64],
        [2],
        [1],
        [HKV as i64],
        [HKV as i64],
    );
    let tq = host_tensor(q.as_ptr(), bspa::sys::kDLBfloat, 16, &mut sq);
    let tbt = host_tensor(pages.as_ptr(), bspa::sys::kDLInt, 32, &mut sbt);
    let tqs = host_tensor(qs.as_ptr(), bspa::sys::kDLInt, 32, &mut sqs);
    let tcl = host_tensor(cl.as_ptr(), bspa::sys::kDLInt, 32, &mut scl);
    let tks = host_tensor(ks.as_ptr(), bspa::sys::kDLFloat, 32, &mut sks);
    let tvs = host_tensor(vs.as_ptr(), bspa::sys::kDLFloat, 32, &mut svs);
    for (bound, scales) in [(0, true), (1, true), (8, true), (-1, true), (0, false)] {
        let mut out = vec![bf16::from_f32(f32::NAN); q.len()];
        let mut tout = host_tensor(out.as_mut_ptr(), bspa::sys::kDLBfloat, 16, &mut so);
        let args = bspa::PagedArgs {
            q: &tq,
            out: &mut tout,
            lse: None,
            k_pages: &tk,
            v_pages: &tv,
            block_table: &tbt,
            query_starts: &tqs,
            context_lens: &tcl,
            max_query_len: T as i32,
            layout: &layout,
            scale: 0.25,
            workspace: None,
            k_scale: if scales { Some(&tks) } else { None },
            v_scale: if scales { Some(&tvs) } else { None },
            max_decode_query_len: bound,
        };
        // Every tensor describes live memory of its shape; a CPU launch is synchronous.
        let result = unsafe { bspa::prefill_paged(args, std::ptr::null_mut()) };
        if bound < 0 {
            let e = result.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{}", e.message());
            assert!(e.message().contains("args->max_decode_query_len = -1"), "{}", e.message());
        } else if scales {
            result.unwrap();
            let same = out.iter().zip(&expected).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "max_decode_query_len {}: prefill_paged differs from the pool's prefill", bound);
        } else {
            let e = result.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NullPointer, "{}", e.message());
            assert!(e.message().contains("args->k_scale"), "{}", e.message());
            assert!(out.iter().all(|x| x.to_f32().is_nan()), "a refused launch wrote out");
        }
    }
}

//! FP8 (e4m3) pools through the safe crate on the CPU backend: scales, their errors, the
//! quantization of known values on write, the dequantization by the prefill, capacity.

use bspa::{bf16, DType, ErrorKind, Layout, Pool, PoolOptions};

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

//! Host element types and DLTensor views over Rust slices.
use std::os::raw::c_void;

use crate::sys;

/// Element type of a pool and of its attention tensors. `Fp8E4m3` is for pools only: its
/// pages hold e4m3 bytes with per-(layer, KV head) scales ([`Pool::set_kv_scales`]); its
/// writes, queries and outputs are [`bf16`](half::bf16) or [`f16`](half::f16).
///
/// [`Pool::set_kv_scales`]: crate::Pool::set_kv_scales
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    Fp8E4m3,
}

impl DType {
    pub(crate) fn raw(self) -> sys::bspa_dtype {
        (match self {
            DType::F32 => sys::BSPA_DTYPE_F32,
            DType::F16 => sys::BSPA_DTYPE_F16,
            DType::BF16 => sys::BSPA_DTYPE_BF16,
            DType::Fp8E4m3 => sys::BSPA_DTYPE_FP8_E4M3,
        }) as sys::bspa_dtype
    }

    pub(crate) fn from_raw(raw: sys::bspa_dtype) -> Option<DType> {
        match raw as u32 {
            x if x == sys::BSPA_DTYPE_F32 => Some(DType::F32),
            x if x == sys::BSPA_DTYPE_F16 => Some(DType::F16),
            x if x == sys::BSPA_DTYPE_BF16 => Some(DType::BF16),
            x if x == sys::BSPA_DTYPE_FP8_E4M3 => Some(DType::Fp8E4m3),
            _ => None,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// Host element types the safe launches accept: `f32`, [`f16`](half::f16) and
/// [`bf16`](half::bf16) (the `half` crate's, re-exported as `bspa::f16` and `bspa::bf16`).
pub trait Element: sealed::Sealed + Copy {
    const DTYPE: DType;
    #[doc(hidden)]
    fn dl_dtype() -> sys::DLDataType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn dl_dtype() -> sys::DLDataType {
        sys::DLDataType { code: sys::kDLFloat as u8, bits: 32, lanes: 1 }
    }
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn dl_dtype() -> sys::DLDataType {
        sys::DLDataType { code: sys::kDLFloat as u8, bits: 16, lanes: 1 }
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn dl_dtype() -> sys::DLDataType {
        sys::DLDataType { code: sys::kDLBfloat as u8, bits: 16, lanes: 1 }
    }
}

/// int32, the dtype of [`prefill_paged`](crate::prefill_paged)'s integer metadata.
pub(crate) const DL_INT32: sys::DLDataType = sys::DLDataType { code: sys::kDLInt as u8, bits: 32, lanes: 1 };
/// uint8, the dtype of [`prefill_paged`](crate::prefill_paged)'s workspace.
pub(crate) const DL_UINT8: sys::DLDataType = sys::DLDataType { code: sys::kDLUInt as u8, bits: 8, lanes: 1 };

/// A compact row-major host DLTensor. `shape` must outlive every use of the result.
pub(crate) fn host_tensor(data: *mut c_void, dtype: sys::DLDataType, shape: &mut [i64]) -> sys::DLTensor {
    sys::DLTensor {
        data,
        device: sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 },
        ndim: shape.len() as i32,
        dtype,
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

//! Helpers shared by the integration tests (each test file is its own crate: `mod common;`).

/// A host DLTensor over `data` (compact row-major); `shape` must outlive it, and an
/// output's `data` must come from a mutable borrow.
pub fn host_tensor<T>(data: *const T, code: u32, bits: u8, shape: &mut [i64]) -> bspa::sys::DLTensor {
    use bspa::sys;
    sys::DLTensor {
        data: data as *mut std::os::raw::c_void,
        device: sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 },
        ndim: shape.len() as i32,
        dtype: sys::DLDataType { code: code as u8, bits, lanes: 1 },
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

use std::ffi::CStr;
use std::fmt;

use crate::sys;

/// What went wrong, one variant per bspa status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// 100: a value out of its documented domain.
    InvalidArgument,
    /// 101: a required pointer was NULL.
    NullPointer,
    /// 102: an index (layer, head, page, block) out of range.
    OutOfRange,
    /// 103: a tensor's ndim, shape or strides are wrong.
    ShapeMismatch,
    /// 104: a tensor's dtype is wrong.
    DtypeMismatch,
    /// 105: a tensor lives on the wrong device.
    DeviceMismatch,
    /// 106: an output buffer is too small.
    BufferTooSmall,
    /// 107: the call is not valid for the object's current state.
    InvalidState,
    /// 200: valid but not supported by this build or device.
    NotSupported,
    /// 201: the requested device does not exist.
    NoDevice,
    /// 300: the pool has no free or evictable page left.
    OutOfPages,
    /// 301: a host or device allocation failed.
    OutOfMemory,
    /// 400: the CUDA runtime reported an error.
    Cuda,
    /// 500: an options struct or the library's ABI version does not match.
    Version,
    /// 900: a bug in bspa.
    Internal,
    /// A status this binding does not know (a newer library).
    Unknown,
}

impl ErrorKind {
    pub fn from_status(status: i32) -> ErrorKind {
        match status as u32 {
            sys::BSPA_ERR_INVALID_ARGUMENT => ErrorKind::InvalidArgument,
            sys::BSPA_ERR_NULL_POINTER => ErrorKind::NullPointer,
            sys::BSPA_ERR_OUT_OF_RANGE => ErrorKind::OutOfRange,
            sys::BSPA_ERR_SHAPE_MISMATCH => ErrorKind::ShapeMismatch,
            sys::BSPA_ERR_DTYPE_MISMATCH => ErrorKind::DtypeMismatch,
            sys::BSPA_ERR_DEVICE_MISMATCH => ErrorKind::DeviceMismatch,
            sys::BSPA_ERR_BUFFER_TOO_SMALL => ErrorKind::BufferTooSmall,
            sys::BSPA_ERR_INVALID_STATE => ErrorKind::InvalidState,
            sys::BSPA_ERR_NOT_SUPPORTED => ErrorKind::NotSupported,
            sys::BSPA_ERR_NO_DEVICE => ErrorKind::NoDevice,
            sys::BSPA_ERR_OUT_OF_PAGES => ErrorKind::OutOfPages,
            sys::BSPA_ERR_OUT_OF_MEMORY => ErrorKind::OutOfMemory,
            sys::BSPA_ERR_CUDA => ErrorKind::Cuda,
            sys::BSPA_ERR_VERSION => ErrorKind::Version,
            sys::BSPA_ERR_INTERNAL => ErrorKind::Internal,
            _ => ErrorKind::Unknown,
        }
    }
}

/// A failed bspa call: its status, kind and the library's message (which names the
/// argument and the bad value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    status: i32,
    message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error made on the Rust side of the binding, with the status it stands for.
    pub(crate) fn new(status: u32, message: String) -> Error {
        Error { kind: ErrorKind::from_status(status as i32), status: status as i32, message }
    }

    /// The status of a failed call plus this thread's last-error message. Must run right
    /// after the call, on the same thread.
    fn last(status: sys::bspa_status) -> Error {
        let message = unsafe { CStr::from_ptr(sys::bspa_last_error()) }.to_string_lossy().into_owned();
        Error { kind: ErrorKind::from_status(status), status, message }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The C status code, e.g. 300 for `BSPA_ERR_OUT_OF_PAGES`.
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The status category: 1 invalid argument, 2 not supported, 3 resource, 4 CUDA,
    /// 5 version, 9 internal.
    pub fn category(&self) -> i32 {
        self.status / 100
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = unsafe { CStr::from_ptr(sys::bspa_status_string(self.status)) };
        write!(f, "{}: {}", name.to_string_lossy(), self.message)
    }
}

impl std::error::Error for Error {}

pub(crate) fn check(status: sys::bspa_status) -> Result<()> {
    if status == sys::BSPA_OK as sys::bspa_status {
        Ok(())
    } else {
        Err(Error::last(status))
    }
}

/// Refuses a library whose ABI differs from the header this crate was built against.
pub(crate) fn check_abi() -> Result<()> {
    let loaded = unsafe { sys::bspa_abi_version() };
    if loaded == sys::BSPA_ABI_VERSION {
        Ok(())
    } else {
        Err(Error::new(
            sys::BSPA_ERR_VERSION,
            format!(
                "libbspa has ABI version {}, this crate was built for {}: rebuild against the library it loads",
                loaded,
                sys::BSPA_ABI_VERSION
            ),
        ))
    }
}

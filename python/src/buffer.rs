//! The bytes handed to Python: a 64-byte-aligned buffer (or a cached
//! component mapped private and copy-on-write, page aligned) that a
//! `Buffer` owns for as long as anything (a numpy array, a torch tensor,
//! a memoryview) refers to it, exposed through the buffer protocol
//! without a copy. The library never reuses a buffer it handed out.
//!
//! This module holds the crate's only `unsafe` code: filling in the
//! `Py_buffer` that the buffer protocol asks for. It is sound because:
//! - the pointer and length are taken once, when the `Buffer` is made,
//!   from the `AlignedBuf` or mapping it then owns and never reads or moves the
//!   contents of again (moving an `AlignedBuf` does not move its heap
//!   or mapped bytes), so Python may write through the view without aliasing a Rust
//!   borrow;
//! - every view holds a strong reference to the `Buffer` (`view.obj`), so
//!   the bytes outlive every view, and Python releases that reference when
//!   the view is released;
//! - `shape` and `strides` point into the `Py_buffer` itself (its `len`
//!   and `itemsize`), which lives as long as the view.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::ptr;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use zt_format::{AlignedBuf, PrivateMap};

/// Verified bytes: in memory of their own, or a cached component mapped
/// private and copy-on-write (a write changes this process's copy of a
/// page, never the cache).
#[derive(Debug)]
pub(crate) enum Bytes {
    Owned(AlignedBuf),
    Mapped(PrivateMap),
}

impl Bytes {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Bytes::Owned(b) => b.as_mut_slice(),
            Bytes::Mapped(m) => m.as_mut_slice(),
        }
    }

    /// A copy in memory of its own (64-byte aligned), for a second caller
    /// of the same object: the library never hands one buffer out twice.
    pub(crate) fn copy(&self) -> Option<Bytes> {
        let bytes = match self {
            Bytes::Owned(b) => b.as_slice(),
            Bytes::Mapped(m) => m.as_slice(),
        };
        zt_format::AlignedBuf::copy_from(bytes)
            .ok()
            .map(Bytes::Owned)
    }
}

/// Bytes received, verified and owned by Python: 64-byte aligned,
/// writable, never reused by the library.
#[pyclass(module = "ztserve._native", frozen)]
#[derive(Debug)]
pub(crate) struct Buffer {
    /// Where the bytes start (taken once from `owner`).
    addr: usize,
    len: usize,
    mapped: bool,
    /// Owns the bytes; never read again after `addr` was taken.
    _owner: Bytes,
}

impl Buffer {
    pub(crate) fn new(mut data: Bytes) -> Buffer {
        let slice = data.as_mut_slice();
        let (addr, len) = (slice.as_mut_ptr() as usize, slice.len());
        Buffer {
            addr,
            len,
            mapped: matches!(data, Bytes::Mapped(_)),
            _owner: data,
        }
    }
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.len
    }

    /// The address of the first byte (a multiple of 64).
    #[getter]
    fn address(&self) -> usize {
        self.addr
    }

    /// Whether the bytes are a cached component mapped from the cache's
    /// file (`mmap=True`) rather than memory of their own.
    #[getter]
    fn mapped(&self) -> bool {
        self.mapped
    }

    fn __repr__(&self) -> String {
        format!("<ztserve Buffer of {} bytes at {:#x}>", self.len, self.addr)
    }

    /// The buffer protocol: one dimension of unsigned bytes (`B`), writable.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no view to fill in"));
        }
        let (addr, len) = {
            let b = slf.get();
            (b.addr, b.len)
        };
        let len = isize::try_from(len)
            .map_err(|_| PyBufferError::new_err("the buffer is too large to export"))?;
        // SAFETY: `view` is a valid, writable `Py_buffer` that Python
        // passes in for this call (checked non-null above); see the module
        // docs for why the pointer and the reference stay valid.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = addr as *mut c_void;
            (*view).len = len;
            (*view).readonly = 0;
            (*view).itemsize = 1;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                c"B".as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                &raw mut (*view).len
            } else {
                ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                &raw mut (*view).itemsize
            } else {
                ptr::null_mut()
            };
            (*view).suboffsets = ptr::null_mut();
            (*view).internal = ptr::null_mut();
        }
        Ok(())
    }

    /// Nothing to undo: Python drops the view's reference to the `Buffer`.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

//! A device buffer: one array on one device.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::client::{ClientInner, element_count};
use super::{args, dtype_of, pjrt_fn, plugin_slice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::ffi;
use stackscan::TensorType;

/// An array on a device, owned: dropping it frees the device memory.
///
/// A buffer passed to a program that donates that parameter (see [`stackscan::Alias`]) is
/// taken over by the program: once it has run, the buffer's memory holds one of the results,
/// and every later use of this handle is [`Error::Donated`]. Dropping it is still fine.
pub struct Buffer {
    pub(crate) client: Arc<ClientInner>,
    pub(crate) raw: *mut ffi::PJRT_Buffer,
    ty: TensorType,
    /// Set once a program took the buffer over; the plugin has deleted its memory.
    donated: AtomicBool,
}

// SAFETY: PJRT buffers may be used and destroyed from any thread.
unsafe impl Send for Buffer {}
// SAFETY: `&Buffer` only reads metadata we cached or issues thread-safe PJRT calls.
unsafe impl Sync for Buffer {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({})", self.ty)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.client.live_buffers.fetch_sub(1, Ordering::SeqCst);
        if let Ok(f) = pjrt_fn!(self.client.api, PJRT_Buffer_Destroy) {
            let mut a = args::<ffi::PJRT_Buffer_Destroy_Args>();
            a.buffer = self.raw;
            // SAFETY: `raw` is a live buffer we own; it is not used after this.
            let err = unsafe { f(&mut a) };
            // Drop cannot report; a failing destroy only leaks.
            let _ = self.client.api.check("PJRT_Buffer_Destroy", err);
        }
    }
}

impl Buffer {
    /// Takes ownership of a buffer the plugin returned, whose type is known.
    pub(crate) fn from_raw(
        client: &Arc<ClientInner>,
        raw: *mut ffi::PJRT_Buffer,
        ty: TensorType,
    ) -> Buffer {
        client.live_buffers.fetch_add(1, Ordering::SeqCst);
        Buffer {
            client: Arc::clone(client),
            raw,
            ty,
            donated: AtomicBool::new(false),
        }
    }

    /// Whether a program took this buffer over (see the type's documentation).
    pub fn is_donated(&self) -> bool {
        self.donated.load(Ordering::Acquire)
    }

    /// [`Error::Donated`] for a buffer a program took over, at `argument` if given.
    pub(crate) fn check_live(&self, argument: Option<(usize, usize)>) -> Result<()> {
        if self.is_donated() {
            return Err(Error::Donated {
                ty: self.ty.clone(),
                argument,
            });
        }
        Ok(())
    }

    /// Asks the plugin whether the buffer's memory is gone (a program it was donated to has
    /// run) and remembers the answer. A plugin without `PJRT_Buffer_IsDeleted` cannot donate
    /// through this binding's view, so nothing is marked.
    pub(crate) fn note_donation(&self) {
        let api = &self.client.api;
        let Ok(f) = pjrt_fn!(api, PJRT_Buffer_IsDeleted) else {
            return;
        };
        let mut a = args::<ffi::PJRT_Buffer_IsDeleted_Args>();
        a.buffer = self.raw;
        // SAFETY: `raw` is a buffer we own and have not destroyed (a deleted buffer's handle
        // stays valid until `PJRT_Buffer_Destroy`).
        let err = unsafe { f(&mut a) };
        if api.check("PJRT_Buffer_IsDeleted", err).is_ok() && a.is_deleted {
            self.donated.store(true, Ordering::Release);
        }
    }

    /// Takes ownership of an output buffer, asking the plugin for its type. The buffer is owned
    /// (and so destroyed) even when the query fails.
    pub(crate) fn from_output(
        client: &Arc<ClientInner>,
        raw: *mut ffi::PJRT_Buffer,
    ) -> Result<Buffer> {
        let placeholder = TensorType::new(stackscan::DType::F32, Vec::new());
        let mut buffer = Buffer::from_raw(client, raw, placeholder);
        buffer.ty = buffer.query_type()?;
        Ok(buffer)
    }

    fn query_type(&self) -> Result<TensorType> {
        let api = &self.client.api;
        let f = pjrt_fn!(api, PJRT_Buffer_ElementType)?;
        let mut a = args::<ffi::PJRT_Buffer_ElementType_Args>();
        a.buffer = self.raw;
        // SAFETY: `raw` is a live buffer.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_Buffer_ElementType", err)?;
        let dtype = dtype_of(a.type_)?;

        let f = pjrt_fn!(api, PJRT_Buffer_Dimensions)?;
        let mut a = args::<ffi::PJRT_Buffer_Dimensions_Args>();
        a.buffer = self.raw;
        // SAFETY: `raw` is a live buffer.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_Buffer_Dimensions", err)?;
        // SAFETY: the dimensions are owned by the buffer, alive for this call.
        let dims = unsafe { plugin_slice(a.dims, a.num_dims) }.to_vec();
        Ok(TensorType::new(dtype, dims))
    }

    /// Element type and dimensions.
    pub fn tensor_type(&self) -> &TensorType {
        &self.ty
    }

    /// Dimensions, major to minor.
    pub fn dims(&self) -> &[i64] {
        &self.ty.dims
    }

    /// Copies the array to the host (dense, row-major). Fails if it does not hold `T`.
    pub fn to_host<T: Element>(&self) -> Result<Vec<T>> {
        self.check_live(None)?;
        if self.ty.dtype != T::DTYPE {
            return Err(Error::ElementType {
                expected: T::DTYPE,
                actual: self.ty.dtype,
            });
        }
        let len = element_count(&self.ty.dims)?;
        let mut out = vec![T::default(); len];
        let api = &self.client.api;
        let f = pjrt_fn!(api, PJRT_Buffer_ToHostBuffer)?;
        let mut a = args::<ffi::PJRT_Buffer_ToHostBuffer_Args>();
        a.src = self.raw;
        a.dst = out.as_mut_ptr().cast();
        a.dst_size = std::mem::size_of_val(out.as_slice());
        // SAFETY: `dst` is valid for `dst_size` bytes and holds exactly the dense array the
        // buffer contains (same element type, checked above; same element count); it stays
        // alive and untouched until the completion event is awaited below.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_Buffer_ToHostBuffer", err)?;
        api.await_event(a.event)?;
        Ok(out)
    }
}

//! Rust types that can be copied to and from device buffers.

use stackscan::DType;

/// A host element type with the same bytes as a device element type. Every bit pattern of
/// these types is a valid value, so a device-to-host copy can write into them directly.
pub trait Element: Copy + Default + Send + Sync + 'static + sealed::Sealed {
    /// The matching element type.
    const DTYPE: DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}

element! {
    f32 => F32,
    half::bf16 => BF16,
    f64 => F64,
    i32 => I32,
    i64 => I64,
}

//! A hand-written guest claiming ABI version 3, which this host does not speak. Otherwise it
//! has every export a version-1 module needs, so only the version check can reject it.

#[cfg(target_arch = "wasm32")]
mod exports {
    #[unsafe(no_mangle)]
    extern "C" fn lancet_abi_version() -> i32 {
        3
    }

    #[unsafe(no_mangle)]
    extern "C" fn lancet_alloc(size: i32) -> i32 {
        let v = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(size.max(1) as usize));
        v.as_ptr() as i32
    }

    #[unsafe(no_mangle)]
    extern "C" fn lancet_free(_ptr: i32, _size: i32) {}

    #[unsafe(no_mangle)]
    extern "C" fn udf(_ptr: i32, _len: i32) -> i64 {
        0
    }
}

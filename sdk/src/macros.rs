//! The export macros. `macro_rules!` rather than an attribute so the SDK needs no proc-macro
//! crate (and UDF builds stay quick).

/// Exports Rust functions `fn(&RecordBatch) -> Result<ArrayRef, UdfError>` as UDF entry points.
///
/// ```ignore
/// export_udf!(score);               // entry point "score" calls fn score
/// export_udf!(my_score => score);   // entry point "my_score" calls fn score
/// ```
/// Only emits code for wasm32, so the same crate can be used natively as a normal library.
#[macro_export]
macro_rules! export_udf {
    ($export:ident => $func:path) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            #[unsafe(export_name = ::core::stringify!($export))]
            extern "C" fn __lancet_entry(ptr: i32, len: i32) -> i64 {
                // SAFETY: the host hands over a buffer it got from lancet_alloc(len).
                let input = unsafe { $crate::abi::take_input(ptr, len) };
                $crate::abi::run_entry(input, $func)
            }
        };
    };
    ($($name:ident),+ $(,)?) => {
        $( $crate::export_udf!($name => $name); )+
    };
}

/// Exports `lancet_init`: the host calls it once per instance with the manifest's config,
/// before any entry point. `hook: fn(&Config) -> Result<(), UdfError>` validates it (an error
/// rejects the UDF definition) and may precompute state; [`config()`](crate::config) returns
/// the config afterwards. Without this macro a module gets no init and an empty config.
#[macro_export]
macro_rules! export_init {
    ($hook:expr) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            #[unsafe(no_mangle)]
            extern "C" fn lancet_init(ptr: i32, len: i32) -> i64 {
                // SAFETY: the host hands over a buffer it got from lancet_alloc(len).
                let input = unsafe { $crate::abi::take_input(ptr, len) };
                $crate::abi::run_init(input, $hook)
            }
        };
        // Natively there is no export; naming the hook still type-checks it (and keeps a
        // plain `fn init` from being reported as unused).
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&$crate::Config) -> ::core::result::Result<(), $crate::UdfError> = $hook;
    };
}

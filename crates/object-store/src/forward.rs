//! [`forward_object_store!`](crate::forward_object_store): an
//! `ObjectStore` wrapper's writes and listings passed to the store it
//! wraps, for wrappers that change only how reads are answered (a
//! counting store in tests, a throttled or instrumented one in a bench).

/// Implements [`object_store::ObjectStore`] for `$ty`, a wrapper whose
/// field `$inner` is the store it wraps: the methods given (at least
/// `get_opts`, written as in an `#[async_trait]` impl; invoke it with
/// braces, which rustfmt leaves as they are) and, passed to
/// `$inner` unchanged, `put_opts`, `put_multipart_opts`, `delete_stream`,
/// `list`, `list_with_delimiter`, `copy_opts` and `rename_opts`. The
/// other methods are the trait's defaults (built on those).
///
/// ```
/// use foliocache_object_store::forward_object_store;
/// use object_store::{memory::InMemory, path::Path, GetOptions, GetResult, Result};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// #[derive(Debug, Default)]
/// struct Counted {
///     inner: InMemory,
///     gets: AtomicU64,
/// }
///
/// impl std::fmt::Display for Counted {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         write!(f, "Counted({})", self.inner)
///     }
/// }
///
/// forward_object_store! { Counted, inner,
///     async fn get_opts(&self, l: &Path, o: GetOptions) -> Result<GetResult> {
///         self.gets.fetch_add(1, Ordering::Relaxed);
///         self.inner.get_opts(l, o).await
///     }
/// }
/// ```
#[macro_export]
macro_rules! forward_object_store {
    ($($args:tt)*) => {
        $crate::__forward_object_store! { $crate::__private::object_store; $($args)* }
    };
}

/// [`forward_object_store!`] for object_store 0.13's trait (feature
/// `object-store-013`): the same, for a wrapper of a 0.13 store when
/// both versions are on (with only 0.13 on, `forward_object_store!`
/// implements 0.13's trait too).
#[cfg(feature = "object-store-013")]
#[macro_export]
macro_rules! forward_object_store_013 {
    ($($args:tt)*) => {
        $crate::__forward_object_store! { $crate::__private::object_store_013; $($args)* }
    };
}

/// [`forward_object_store!`] of the trait of `$os` (not an API).
#[doc(hidden)]
#[macro_export]
macro_rules! __forward_object_store {
    ($os:path; $ty:ty, $inner:ident, $($methods:tt)*) => {
        const _: () = {
        use $os as __os;
        #[$crate::__private::async_trait]
        impl __os::ObjectStore for $ty {
            $($methods)*

            async fn put_opts(
                &self,
                l: &__os::path::Path,
                p: __os::PutPayload,
                o: __os::PutOptions,
            ) -> __os::Result<__os::PutResult> {
                self.$inner.put_opts(l, p, o).await
            }

            async fn put_multipart_opts(
                &self,
                l: &__os::path::Path,
                o: __os::PutMultipartOptions,
            ) -> __os::Result<
                Box<dyn __os::MultipartUpload>,
            > {
                self.$inner.put_multipart_opts(l, o).await
            }

            fn delete_stream(
                &self,
                l: $crate::__private::BoxStream<
                    'static,
                    __os::Result<__os::path::Path>,
                >,
            ) -> $crate::__private::BoxStream<
                'static,
                __os::Result<__os::path::Path>,
            > {
                self.$inner.delete_stream(l)
            }

            fn list(
                &self,
                p: Option<&__os::path::Path>,
            ) -> $crate::__private::BoxStream<
                'static,
                __os::Result<__os::ObjectMeta>,
            > {
                self.$inner.list(p)
            }

            async fn list_with_delimiter(
                &self,
                p: Option<&__os::path::Path>,
            ) -> __os::Result<__os::ListResult> {
                self.$inner.list_with_delimiter(p).await
            }

            async fn copy_opts(
                &self,
                from: &__os::path::Path,
                to: &__os::path::Path,
                o: __os::CopyOptions,
            ) -> __os::Result<()> {
                self.$inner.copy_opts(from, to, o).await
            }

            async fn rename_opts(
                &self,
                from: &__os::path::Path,
                to: &__os::path::Path,
                o: __os::RenameOptions,
            ) -> __os::Result<()> {
                self.$inner.rename_opts(from, to, o).await
            }
        }
        };
    };
}

//! Mounting a store: the store a URL names ([`store_for_url`]), fuser's
//! configuration, and the mount served in this thread
//! ([`serve_objects`]) or in the background ([`spawn_objects`]).

use std::io;
use std::sync::Arc;

use fuser::{BackgroundSession, MountOption, Session};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreScheme};

use super::{ObjectFs, ObjectOptions, Pager};
use crate::MountOptions;

/// The store and the prefix in it that `url` names, as object_store's
/// `parse_url_opts` reads it: `file:///DIR` (a local directory, through
/// `LocalFileSystem`), `s3://BUCKET/PREFIX`, `gs://BUCKET/PREFIX`,
/// `az://CONTAINER/PREFIX` (and the `https://` forms object_store knows
/// for them), configured by `options`, the keys object_store's builders
/// read, in any case (`aws_access_key_id`, `aws_secret_access_key`,
/// `aws_region`, `aws_endpoint`, `aws_allow_http`,
/// `google_service_account`, `azure_storage_account_name`, ...; others
/// are ignored): as `foliocache mount` passes them, the `AWS_*`,
/// `GOOGLE_*` and `AZURE_*` environment variables and the AWS profile's
/// files.
///
/// # Errors
/// `InvalidInput`: not a URL, a scheme this build does not read (and
/// `memory://`, which would mount an empty store of this process's own),
/// a `file://` path that is not a directory, the store's configuration
/// error.
pub fn store_for_url(
    url: &str,
    options: impl IntoIterator<Item = (String, String)>,
) -> io::Result<(Arc<dyn ObjectStore>, Path)> {
    let (store, _, prefix) = open_url(url, options)?;
    Ok((store, prefix))
}

/// Builds the store `$builder` makes of `$url` with `$options` (as
/// object_store's `parse_url_opts` does: keys it does not know are
/// ignored), with what lists it in pages: the store itself.
macro_rules! paged_store {
    ($builder:ty, $url:expr, $options:expr, $invalid:expr) => {{
        let builder = $options.into_iter().fold(
            <$builder>::new().with_url($url),
            |b, (key, value)| match key.to_ascii_lowercase().parse() {
                Ok(k) => b.with_config(k, value),
                Err(_) => b,
            },
        );
        let store = Arc::new(
            builder
                .build()
                .map_err(|e| $invalid(format!("{}: {e}", $url)))?,
        );
        let pager: Pager = store.clone();
        (store as Arc<dyn ObjectStore>, Some(pager))
    }};
}

/// [`store_for_url`]'s store and prefix, and what lists the store's
/// directories in pages where it can (S3, GCS, Azure: object_store's
/// `PaginatedListStore`; a local directory is listed whole).
pub(super) fn open_url(
    url: &str,
    options: impl IntoIterator<Item = (String, String)>,
) -> io::Result<(Arc<dyn ObjectStore>, Option<Pager>, Path)> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let parsed = url::Url::parse(url).map_err(|e| invalid(format!("{url}: not a URL: {e}")))?;
    if parsed.scheme() == "memory" {
        return Err(invalid(format!(
            "{url}: a memory:// store lives inside this process and starts empty: there is \
             nothing to mount (file:///DIR, s3://BUCKET, gs://BUCKET and az://CONTAINER are)"
        )));
    }
    if parsed.scheme() == "file" {
        let dir = parsed
            .to_file_path()
            .map_err(|()| invalid(format!("{url}: not a local path")))?;
        if !dir.is_dir() {
            return Err(invalid(format!(
                "{url}: {} is not a directory",
                dir.display()
            )));
        }
    }
    let (scheme, path) =
        ObjectStoreScheme::parse(&parsed).map_err(|e| invalid(format!("{url}: {e}")))?;
    let (store, pager) = match scheme {
        ObjectStoreScheme::AmazonS3 => paged_store!(AmazonS3Builder, url, options, invalid),
        ObjectStoreScheme::GoogleCloudStorage => {
            paged_store!(GoogleCloudStorageBuilder, url, options, invalid)
        }
        ObjectStoreScheme::MicrosoftAzure => {
            paged_store!(MicrosoftAzureBuilder, url, options, invalid)
        }
        _ => {
            let (store, _) = object_store::parse_url_opts(&parsed, options)
                .map_err(|e| invalid(format!("{url}: {e}")))?;
            (Arc::from(store), None)
        }
    };
    let prefix = Path::parse(path).map_err(|e| invalid(format!("{url}: {e}")))?;
    Ok((store, pager, prefix))
}

/// fuser's configuration for a mount of `url` with `opts`: `opts`'s
/// ([`MountOptions::fuser_config`]), read-only.
fn config(opts: &MountOptions, url: &str) -> io::Result<fuser::Config> {
    let own = [
        (opts.cache_name.is_some(), "a named cache"),
        (opts.dontcache, "dontcache"),
        (opts.state.is_some(), "a state file (warm restarts)"),
    ];
    if let Some((_, what)) = own.iter().find(|(set, _)| *set) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: not for a mount of an object store ({url})"),
        ));
    }
    let mut c = opts.config_named(url);
    c.mount_options.push(MountOption::RO);
    Ok(c)
}

/// Mounts the object store `url` names (configured by the environment
/// and the AWS profile's files: [`store_for_url`]) at `mountpoint`, read-only,
/// through a cache `opts` sizes (its `capacity`, `max_folio`; its
/// `metrics` served with the store's figures) and `objects`'s
/// time-to-live and disk tier, and serves it in this thread until it is
/// unmounted or the process gets SIGINT, SIGTERM or SIGHUP (as
/// [`serve`](crate::serve)). `ready` is called once the mount is up.
///
/// # Errors
/// [`ObjectFs::for_url`]'s; `InvalidInput` for `opts` asking for a
/// named cache, `dontcache` or a state file; the mount's; the metrics
/// server's.
pub fn serve_objects(
    url: &str,
    mountpoint: &std::path::Path,
    opts: &MountOptions,
    objects: &ObjectOptions,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let signals = crate::block_unmount_signals()?;
    let m = crate::check_mountpoint(mountpoint)?;
    let config = config(opts, url)?;
    let env = crate::cloud_env::store_options();
    let fs = ObjectFs::for_url(url, env, opts.build_object_cache()?, objects)?;
    // Served until this returns (the mount ended).
    let _metrics = match opts.metrics {
        Some(addr) => {
            let mut registry = prometheus_client::registry::Registry::default();
            foliocache::metrics::register(fs.store.cache(), &mut registry);
            fs.store.register_metrics(&mut registry);
            Some(foliocache::metrics::serve(addr, registry)?)
        }
        None => None,
    };
    let session = Session::new(fs, &m, &config)?;
    crate::run_until_unmounted(session, &m, signals, ready)
}

/// Mounts `fs` at `mountpoint` read-only with `opts`'s threads and
/// options, named `source`, and serves it in background threads (tests,
/// programs that embed the mount); dropping the session unmounts.
///
/// # Errors
/// `InvalidInput` as [`serve_objects`]; the mount's.
pub fn spawn_objects(
    fs: ObjectFs,
    source: &str,
    mountpoint: &std::path::Path,
    opts: &MountOptions,
) -> io::Result<BackgroundSession> {
    let m = crate::check_mountpoint(mountpoint)?;
    Session::new(fs, &m, &config(opts, source)?)?.spawn()
}

//! A multipart upload through a [`CachedStore`](crate::CachedStore): the
//! inner store's upload, which invalidates the path when it completes.

use super::object_store;
use std::sync::Arc;

use async_trait::async_trait;
use object_store::path::Path;
use object_store::{MultipartUpload, PutPayload, PutResult, Result, UploadPart};

use super::objects::Objects;

/// The inner store's upload of `path`; [`complete`](MultipartUpload::complete)
/// invalidates the path once the store answered (whatever it answered: a
/// failed completion may still have replaced the object).
#[derive(Debug)]
pub(crate) struct InvalidatingUpload {
    pub(crate) inner: Box<dyn MultipartUpload>,
    pub(crate) path: Path,
    pub(crate) objects: Arc<Objects>,
}

#[async_trait]
impl MultipartUpload for InvalidatingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let r = self.inner.complete().await;
        self.objects.invalidate(&self.path);
        r
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}

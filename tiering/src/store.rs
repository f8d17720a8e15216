//! The object store the archive lives in, built from a URL: `file:///path` (the
//! default, under the agent's data directory) or `s3://bucket/prefix` with the standard
//! AWS settings from the environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`); S3-compatible servers are addressed
//! path-style. Every call has a timeout; S3 calls also retry with backoff (bounded in
//! count and time) inside `object_store`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

use crate::error::{Error, Result};

/// How long one object-store call may take, retries included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// An object store and the prefix under which the archive lives.
#[derive(Debug, Clone)]
pub struct Archive {
    pub store: Arc<dyn ObjectStore>,
    pub prefix: Path,
    pub url: String,
}

impl Archive {
    /// Builds the store for `url`.
    pub fn from_url(url: &str) -> Result<Archive> {
        if let Some(dir) = url.strip_prefix("file://") {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                context: format!("create archive directory {dir}"),
                source,
            })?;
            // Durable when the put returns, as S3's objects are: the manifest entry
            // published next must not name an object a machine crash can take back.
            let store = LocalFileSystem::new_with_prefix(dir)
                .map_err(|source| Error::Store {
                    context: format!("open {url}"),
                    source,
                })?
                .with_fsync(true);
            return Ok(Archive {
                store: Arc::new(store),
                prefix: Path::default(),
                url: url.to_string(),
            });
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(Error::Config(format!("'{url}' names no bucket")));
            }
            // allow_http lives in the client options, which `with_client_options` replaces
            // whole: set it there.
            let endpoint_is_http =
                std::env::var("AWS_ENDPOINT_URL").is_ok_and(|e| e.starts_with("http://"));
            let store = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_virtual_hosted_style_request(false)
                .with_client_options(
                    ClientOptions::new()
                        .with_timeout(Duration::from_secs(30))
                        .with_allow_http(endpoint_is_http),
                )
                .with_retry(RetryConfig {
                    max_retries: 5,
                    retry_timeout: Duration::from_secs(30),
                    ..RetryConfig::default()
                })
                .build()
                .map_err(|source| Error::Store {
                    context: format!("configure {url}"),
                    source,
                })?;
            return Ok(Archive {
                store: Arc::new(store),
                prefix: Path::from(prefix.trim_matches('/')),
                url: url.to_string(),
            });
        }
        Err(Error::Config(format!(
            "unsupported archive URL '{url}': use file:///dir or s3://bucket/prefix"
        )))
    }

    /// The object path of a partition's archived range.
    pub fn object_path(
        &self,
        topic: &str,
        partition: i32,
        first: i64,
        last: i64,
        unique: &str,
    ) -> Path {
        let dir = self.partition_dir(topic, partition);
        Path::from(format!("{dir}/{first:020}-{last:020}-{unique}.parquet"))
    }

    /// The directory a partition's objects live in.
    pub fn partition_dir(&self, topic: &str, partition: i32) -> Path {
        let name = format!("topic={topic}/partition={partition}");
        if self.prefix.as_ref().is_empty() {
            Path::from(name)
        } else {
            Path::from(format!("{}/{name}", self.prefix))
        }
    }

    pub async fn put(&self, path: &Path, bytes: Bytes) -> Result<()> {
        let call = self.store.put(path, PutPayload::from(bytes));
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(Error::Store {
                context: format!("put {path}"),
                source,
            }),
            Err(_) => Err(Error::Timeout(format!("put {path}"))),
        }
    }

    /// The objects under `dir`.
    pub async fn list(&self, dir: &Path) -> Result<Vec<object_store::ObjectMeta>> {
        use futures::TryStreamExt;
        let call = self.store.list(Some(dir)).try_collect::<Vec<_>>();
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(objects)) => Ok(objects),
            Ok(Err(source)) => Err(Error::Store {
                context: format!("list {dir}"),
                source,
            }),
            Err(_) => Err(Error::Timeout(format!("list {dir}"))),
        }
    }

    /// Deletes an object; one already gone counts as deleted (a retried collection).
    pub async fn delete(&self, path: &Path) -> Result<()> {
        match tokio::time::timeout(CALL_TIMEOUT, self.store.delete(path)).await {
            Ok(Ok(())) | Ok(Err(object_store::Error::NotFound { .. })) => Ok(()),
            Ok(Err(source)) => Err(Error::Store {
                context: format!("delete {path}"),
                source,
            }),
            Err(_) => Err(Error::Timeout(format!("delete {path}"))),
        }
    }

    pub async fn get(&self, path: &Path) -> Result<Bytes> {
        let call = async { self.store.get(path).await?.bytes().await };
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(source)) => Err(Error::Store {
                context: format!("get {path}"),
                source,
            }),
            Err(_) => Err(Error::Timeout(format!("get {path}"))),
        }
    }
}

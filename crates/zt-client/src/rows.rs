//! Rows `[start, end)` along dimension 0 of a raw dense object
//! ([`zt_format::rows`]), fetched without the rest of the tensor and
//! verified: over ztp/1 with a `get` carrying `rows`, over HTTP from a
//! ztserve's component route with `?rows=` (its `Content-Digest` checked);
//! from a plain Range server, which has no row digests, the whole
//! component is fetched, checked against its digest, and the rows copied
//! out.

use zt_format::rows::Rows;
use zt_format::AlignedBuf;

use crate::client::Transport;
use crate::error::{At, Error, Result};
use crate::remote::select_from;
use crate::verify::{Delivered, Verification};
use crate::{Client, Remote};

impl Client {
    /// Rows `rows` of `object` in `remote` (the manifest this client
    /// read), as one verified component: the object's `data` cut to
    /// those rows.
    pub async fn read_rows(&self, remote: &Remote, object: &str, rows: Rows) -> Result<Delivered> {
        let obj = remote
            .manifest
            .objects
            .get(object)
            .ok_or_else(|| Error::Server {
                status: crate::Status::Ztp(ztp_proto::Code::NotFound),
                message: format!("{}: no object {object:?}", self.url),
            })?;
        let (start, len) = rows
            .span(obj)
            .map_err(|e| Error::Usage(format!("{}: object {object:?}: {e}", self.url)))?;
        let at = At {
            object: object.to_owned(),
            component: "data".to_owned(),
        };
        let c = obj
            .components
            .get("data")
            .ok_or_else(|| Error::Protocol(format!("{}: {at}: missing", self.url)))?;
        match &self.transport {
            Transport::Quic { client, path } => {
                let mut f = client
                    .request_rows(path, object, (rows.start, rows.end), &remote.etag)
                    .await?;
                let d = f.next().await.ok_or_else(|| {
                    Error::Protocol(format!("{}: {at}: no rows arrived", self.url))
                })??;
                if d.object != object || d.data.len() as u64 != len {
                    return Err(Error::Protocol(format!(
                        "{}: asked for {len} bytes of rows of {object:?}, got {} of {:?}",
                        self.url,
                        d.data.len(),
                        d.object
                    )));
                }
                Ok(d)
            }
            Transport::Http { source, .. } => {
                let (data, digest, verification) = match &remote.api {
                    Some(base) => {
                        let (data, digest) = source
                            .read_rows(base, &remote.etag, object, rows, len)
                            .await?;
                        (data, Some(digest), Verification::Verified)
                    }
                    None => {
                        let one = [zt_format::select::escape(object)];
                        let manifest = select_from(&remote.manifest, &one)?;
                        let whole = Remote {
                            manifest,
                            ..remote.clone()
                        };
                        let mut f = source.fetch(whole, &[], None)?;
                        let d = f.next().await.ok_or_else(|| {
                            Error::Protocol(format!("{}: {at}: nothing arrived", self.url))
                        })??;
                        let part = usize::try_from(start)
                            .ok()
                            .zip(usize::try_from(start + len).ok())
                            .and_then(|(a, b)| d.data.as_slice().get(a..b))
                            .ok_or_else(|| {
                                Error::Protocol(format!(
                                    "{}: {at}: shorter than its rows",
                                    self.url
                                ))
                            })?;
                        let data =
                            AlignedBuf::copy_from(part).map_err(|r| Error::corrupt(&at, r))?;
                        (data, None, d.verification)
                    }
                };
                Ok(Delivered {
                    object: object.to_owned(),
                    component: "data".to_owned(),
                    seq: 0,
                    dtype: c.dtype,
                    logical_type: c.logical_type.clone(),
                    encoding: c.encoding,
                    uncompressed_length: None,
                    digest,
                    data,
                    verification,
                })
            }
        }
    }
}

//! Rows `[start, end)` along dimension 0 of a raw dense object
//! ([`zt_format::rows`]), fetched without the rest of the tensor and
//! verified: over ztp/1 with a `get` carrying `rows`, over HTTP from a
//! ztserve's component route with `?rows=` (its `Content-Digest` checked);
//! from a plain Range server, which has no row digests, or a local file,
//! the whole component is read, checked against its digest, and the rows
//! copied out. Each transport's way is in `transport/`.

use zt_format::rows::Rows;
use zt_format::Object;

use crate::error::{At, Error, Result};
use crate::transport::RowsAsked;
use crate::verify::Delivered;
use crate::{Client, Remote};

impl Client {
    /// `object` of `remote`'s manifest, or the server's "not found" for it.
    pub(crate) fn object<'a>(&self, remote: &'a Remote, object: &str) -> Result<&'a Object> {
        remote
            .manifest
            .objects
            .get(object)
            .ok_or_else(|| Error::Server {
                status: crate::Status::Ztp(ztp_proto::Code::NotFound),
                message: format!("{}: no object {object:?}", self.url),
                retry_after: None,
            })
    }

    /// Rows `rows` of `object` in `remote` (the manifest this client
    /// read), as one verified component: the object's `data` cut to
    /// those rows.
    pub async fn read_rows(&self, remote: &Remote, object: &str, rows: Rows) -> Result<Delivered> {
        let obj = self.object(remote, object)?;
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
        self.transport
            .read_rows(RowsAsked {
                remote,
                object,
                rows,
                start,
                len,
                data: c,
            })
            .await
    }
}

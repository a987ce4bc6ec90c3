//! Rectangular slices of a raw dense object ([`zt_format::slice`]),
//! fetched without the rest of the tensor where the server gathers them:
//! from a ztserve's component route with `?slice=` (its `Content-Digest`,
//! the sha256 of exactly the gathered bytes, checked), or over ztp/1 as a
//! `get` with `slice` (feature `slices`, the stream checked against the
//! digest the server announced). Elsewhere the rows the slice spans are
//! read as rows are (from a plain Range server or a local file, the whole
//! component checked against its digest), and the slice copied out of
//! them. Each transport's way is in `transport/`.

use zt_format::slice::Slice;
use zt_format::AlignedBuf;

use crate::error::{Error, Result};
use crate::transport::SliceAsked;
use crate::verify::Delivered;
use crate::{Client, Remote};

impl Client {
    /// `slice` of `object` in `remote` (the manifest this client read), as
    /// one verified component holding the slice's elements in row-major
    /// order, and the slice's shape.
    pub async fn read_slice(
        &self,
        remote: &Remote,
        object: &str,
        slice: &Slice,
    ) -> Result<(Delivered, Vec<u64>)> {
        let obj = self.object(remote, object)?;
        let gather = slice
            .gather(obj, u64::MAX)
            .map_err(|e| Error::Usage(format!("{}: object {object:?}: {e}", self.url)))?;
        let data = obj
            .components
            .get("data")
            .ok_or_else(|| Error::Protocol(format!("{}: {object}: no data component", self.url)))?;
        let shape = gather.shape.clone();
        if gather.is_empty() {
            // Nothing to fetch, nothing to verify.
            let at = crate::At {
                object: object.to_owned(),
                component: "data".to_owned(),
            };
            let d = Delivered {
                object: object.to_owned(),
                component: "data".to_owned(),
                seq: 0,
                dtype: data.dtype,
                logical_type: data.logical_type.clone(),
                encoding: data.encoding,
                uncompressed_length: None,
                digest: None,
                data: AlignedBuf::copy_from(&[]).map_err(|r| Error::corrupt(&at, r))?,
                verification: crate::Verification::Verified,
            };
            return Ok((d, shape));
        }
        let got = self
            .transport
            .read_slice(SliceAsked {
                remote,
                object,
                gather: &gather,
                data,
            })
            .await?;
        Ok((got, shape))
    }
}

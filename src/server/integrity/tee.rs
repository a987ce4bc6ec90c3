//! Two hashes of the same bytes in one pass: a component's digest and the
//! CRC its source or the daemon keeps beside it (the CRC-32C a checked
//! component keeps for later re-checks, the CRC-32 a MATRIX-ATOM file
//! stores), fed piece by piece as a [`Visit`] of the component's bytes.

use std::convert::Infallible;

use zt_format::atoms::Crc32;
use zt_format::Hasher;

use crate::server::store::blob::Visit;

/// Something that hashes bytes fed to it in order.
pub(crate) trait Update: Send + 'static {
    fn update(&mut self, bytes: &[u8]);
}

impl Update for Hasher {
    fn update(&mut self, bytes: &[u8]) {
        Hasher::update(self, bytes);
    }
}

impl Update for Crc32 {
    fn update(&mut self, bytes: &[u8]) {
        Crc32::update(self, bytes);
    }
}

/// `digest`, and `crc` when there is one, fed the same pieces.
#[derive(Debug)]
pub(crate) struct Tee<C> {
    pub(crate) digest: Hasher,
    pub(crate) crc: Option<C>,
}

impl<C: Update> Visit for Tee<C> {
    type Error = Infallible;

    fn piece(&mut self, bytes: &[u8]) -> Result<(), Infallible> {
        self.digest.update(bytes);
        if let Some(crc) = &mut self.crc {
            crc.update(bytes);
        }
        Ok(())
    }
}

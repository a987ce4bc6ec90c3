//! Fetching components over HTTP: each one's parts as parallel Range
//! requests streamed into its aligned buffer and hashed in order as they
//! arrive, synthesized components from the client or the server's route,
//! and row ranges from a ztserve's component route under a digest it
//! attests.

use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use reqwest::StatusCode;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use zt_format::AlignedBuf;

use crate::budget::{Budget, Held};
use crate::error::{At, Error, Result};
use crate::fetch::{Event, Fetch};
use crate::remote::Remote;
use crate::verify::{Check, Delivered};

use super::request::Want;
use super::{HttpSource, SynthesizedAt};

/// A component part's turn: a connection slot, and for a component's first
/// part the budget its buffer holds (bounded fetches only).
type Turn = (OwnedSemaphorePermit, Option<Held>);

/// Components larger than this are fetched as several ranges in parallel.
const SPLIT: usize = 4 << 20;

impl HttpSource {
    /// Starts fetching every object of `remote.manifest` (already filtered
    /// to the selection), explicit `order` first, at most `connections`
    /// requests at a time; components are delivered as they complete,
    /// synthesized ones from `synthesized`. With `max_buffered`, no
    /// request goes out for a component whose bytes would not fit beside
    /// those delivered but not yet taken.
    pub(crate) fn fetch(
        &self,
        remote: Remote,
        synthesized: SynthesizedAt,
        order: &[String],
        max_buffered: Option<u64>,
    ) -> Result<Fetch> {
        let manifest = remote.manifest;
        let items: Vec<(At, zt_format::Component)> = zt_format::send_order(&manifest, order)
            .into_iter()
            .map(|(o, r, c)| {
                let at = At {
                    object: o.to_owned(),
                    component: r.to_owned(),
                };
                (at, c.clone())
            })
            .collect();
        for (at, c) in &items {
            if c.is_transformed() {
                return Err(Error::Usage(format!("{}: {at} is in a legacy layout that byte ranges cannot carry; convert the file with zt pack", self.url)));
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let n = items.len() as u64;
        let synthesized = Arc::new(synthesized);
        let files = manifest.files.clone();
        // Every part of every component waits for a turn that one driver
        // hands out strictly in send order, so the first layer's requests
        // go out first whatever order the tasks happen to run in.
        // A component's first turn also waits for room in the budget.
        let mut turns: Vec<(oneshot::Sender<Turn>, Option<u64>)> = Vec::new();
        let jobs = runs(&items, self.options.component_cap);
        let mut items = items.into_iter();
        let mut seq = 0u64;
        for job in jobs {
            let job: Vec<(At, zt_format::Component)> = items.by_ref().take(job).collect();
            let Some((_, first)) = job.first() else {
                continue;
            };
            // A component of a sharded checkpoint is read from its shard,
            // under the shard's own ETag (a run's components share one).
            let (src, etag) = match &first.file {
                None => (self.clone(), remote.etag.clone()),
                Some(f) => {
                    let part = files
                        .get(&**f)
                        .and_then(|p| p.etag.clone())
                        .ok_or_else(|| {
                            Error::Protocol(format!(
                                "{}: the manifest gives no ETag for file {f:?}",
                                self.url
                            ))
                        })?;
                    (self.for_file(f)?, part)
                }
            };
            let tx = tx.clone();
            let first_seq = seq;
            seq += job.len() as u64;
            if job.len() > 1 {
                // Small neighbours: one request, one turn for all of them.
                let (give, take) = oneshot::channel();
                let whole = span(&job);
                turns.push((give, Some(whole.end - whole.start)));
                tokio::spawn(async move {
                    let (delivered, mut held) = src.run(&job, first_seq, &etag, take).await;
                    let last = delivered.len().saturating_sub(1);
                    for (i, r) in delivered.into_iter().enumerate() {
                        let held = if i == last { held.take() } else { None };
                        let _ = tx.send((Event::Component(r), held));
                    }
                });
                continue;
            }
            let Some(item) = job.into_iter().next() else {
                continue;
            };
            let length = item.1.length;
            let parts = usize::try_from(length.div_ceil(SPLIT as u64).max(1)).unwrap_or(usize::MAX);
            let (give, take): (Vec<_>, Vec<_>) = (0..parts).map(|_| oneshot::channel()).unzip();
            turns.extend(
                give.into_iter()
                    .enumerate()
                    .map(|(i, g)| (g, (i == 0).then_some(length))),
            );
            let synthesized = Arc::clone(&synthesized);
            tokio::spawn(async move {
                let mut held = None;
                let r = src
                    .component(&item, first_seq, &etag, take, &mut held, &synthesized)
                    .await;
                let _ = tx.send((Event::Component(r), held));
            });
        }
        let slots = Arc::new(Semaphore::new(self.options.http_connections()));
        let budget = max_buffered.map(Budget::new);
        tokio::spawn(async move {
            for (turn, length) in turns {
                let held = match (&budget, length) {
                    (Some(b), Some(len)) => b.reserve(len).await,
                    _ => None,
                };
                let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                // A component that already failed drops its turns, and
                // the permit (and budget) go straight back.
                let _ = turn.send((permit, held));
            }
        });
        Ok(Fetch::new(
            self.url.clone(),
            0,
            manifest,
            remote.etag,
            remote.size,
            n,
            rx,
        ))
    }

    /// The components of a run ([`runs`]): their span read in one
    /// request, then each copied into its own buffer and checked; a
    /// result for each, in order, and the budget the run held.
    async fn run(
        &self,
        job: &[(At, zt_format::Component)],
        first_seq: u64,
        etag: &str,
        turn: oneshot::Receiver<Turn>,
    ) -> (Vec<Result<Delivered>>, Option<Held>) {
        let Some((at, _)) = job.first() else {
            return (Vec::new(), None);
        };
        let whole = span(job);
        let read = async {
            let (permit, held) = turn
                .await
                .map_err(|_| Error::Transport(format!("{at}: the fetch was dropped")))?;
            let len = whole.end - whole.start;
            let mut bytes = self.pool.take(len).map_err(|r| Error::corrupt(at, r))?;
            let filled = self.fill(whole.start, bytes.as_mut_slice(), etag).await;
            drop(permit);
            filled.map_err(|e| e.within(&at.to_string()))?;
            Ok::<_, Error>((bytes, held))
        };
        let (bytes, held) = match read.await {
            Ok(read) => read,
            Err(e) => {
                // The first component carries the reason; the others say
                // why they did not come.
                let mut out = vec![Err(e)];
                out.extend(job.iter().skip(1).map(|(at, _)| {
                    Err(Error::Transport(format!(
                        "{at}: not read: the request for its neighbours failed"
                    )))
                }));
                return (out, None);
            }
        };
        let out = job
            .iter()
            .enumerate()
            .map(|(i, (at, c))| {
                let from = usize::try_from(c.offset - whole.start).unwrap_or(usize::MAX);
                let to = from.saturating_add(usize::try_from(c.length).unwrap_or(usize::MAX));
                let piece = bytes.as_slice().get(from..to).ok_or_else(|| {
                    Error::Protocol(format!("{at}: outside the bytes read for it"))
                })?;
                let mut check = Check::new(
                    c.digest.as_ref(),
                    self.options.allow_unverified,
                    self.options.require_digest,
                    at,
                )?;
                check.update(piece);
                let verification = check.finish(at)?;
                let data = AlignedBuf::copy_from(piece).map_err(|r| Error::corrupt(at, r))?;
                Ok(delivered(at, first_seq + i as u64, c, data, verification))
            })
            .collect();
        self.pool.give(bytes);
        (out, held)
    }

    async fn component(
        &self,
        (at, c): &(At, zt_format::Component),
        seq: u64,
        etag: &str,
        turns: Vec<oneshot::Receiver<Turn>>,
        held: &mut Option<Held>,
        synthesized: &SynthesizedAt,
    ) -> Result<Delivered> {
        let cap = self.options.component_cap;
        if c.length > cap {
            let why = format!("{} bytes exceed the cap of {cap}", c.length);
            return Err(Error::corrupt(at, why));
        }
        let mut check = Check::new(
            c.digest.as_ref(),
            self.options.allow_unverified,
            self.options.require_digest,
            at,
        )?;
        let gone = || Error::Transport(format!("{at}: the fetch was dropped"));
        let mut turns = turns.into_iter();
        // The first part's turn comes before the buffer is allocated, so
        // queued components hold no memory.
        let (first, budget) = turns.next().ok_or_else(gone)?.await.map_err(|_| gone())?;
        *held = budget;
        // Every byte is overwritten by the parts below, or the component fails.
        let mut data = self
            .pool
            .take(c.length)
            .map_err(|r| Error::corrupt(at, r))?;
        if c.synthesized {
            // No byte range of the file holds it: its bytes are here, or
            // at the server's component route. One part, one turn.
            drop(turns);
            self.synthesized_bytes(at, synthesized, data.as_mut_slice())
                .await?;
            check.update(data.as_slice());
            let verification = check.finish(at)?;
            return Ok(delivered(at, seq, c, data, verification));
        }
        // Parts are fetched at once, each streamed straight to its place in
        // the aligned buffer; the digest takes each part as soon as every
        // part before it is in, so hashing overlaps the transfer.
        let mut parts = FuturesUnordered::new();
        let mut first = Some(first);
        for (i, part) in data.as_mut_slice().chunks_mut(SPLIT).enumerate() {
            let held = first.take();
            let turn = if held.is_none() { turns.next() } else { None };
            let pos = c.offset + (i * SPLIT) as u64;
            parts.push(async move {
                let _permit = match (held, turn) {
                    (Some(p), _) => p,
                    (None, Some(t)) => t.await.map_err(|_| gone())?.0,
                    (None, None) => return Err(gone()),
                };
                self.fill(pos, part, etag)
                    .await
                    .map(|()| (i, part))
                    .map_err(|e| e.within(&at.to_string()))
            });
        }
        let mut arrived: Vec<Option<&mut [u8]>> = Vec::new();
        let mut next = 0usize;
        while let Some(r) = parts.next().await {
            let (i, part) = r?;
            if arrived.len() <= i {
                arrived.resize_with(i + 1, || None);
            }
            if let Some(slot) = arrived.get_mut(i) {
                *slot = Some(part);
            }
            while let Some(Some(part)) = arrived.get(next) {
                check.update(part);
                next += 1;
            }
        }
        drop((parts, arrived));
        let verification = check.finish(at)?;
        Ok(delivered(at, seq, c, data, verification))
    }

    /// Rows `rows` (`len` bytes) of `object`'s `data` from a ztserve's
    /// component route under `base`, pinned to version `etag`: a `206`
    /// whose `Content-Digest` (sha-256 of exactly these bytes, attested by
    /// the server) they must match. Returns the bytes and that digest.
    pub(crate) async fn read_rows(
        &self,
        base: &str,
        etag: &str,
        object: &str,
        rows: zt_format::rows::Rows,
        len: u64,
    ) -> Result<(AlignedBuf, zt_format::Digest)> {
        let asked = Attested {
            key: "rows",
            value: format!("{}:{}", rows.start, rows.end),
            status: StatusCode::PARTIAL_CONTENT,
        };
        self.read_attested(base, etag, object, asked, len).await
    }

    /// Slice `spec` (`len` bytes once gathered) of `object`'s `data` from a
    /// ztserve's component route under `base`, pinned to version `etag`:
    /// a `200` whose `Content-Digest` the gathered bytes must match.
    pub(crate) async fn read_slice(
        &self,
        base: &str,
        etag: &str,
        object: &str,
        spec: &str,
        len: u64,
    ) -> Result<(AlignedBuf, zt_format::Digest)> {
        let asked = Attested {
            key: "slice",
            value: spec.to_owned(),
            status: StatusCode::OK,
        };
        self.read_attested(base, etag, object, asked, len).await
    }

    /// Part of `object`'s `data` that the server cut and attested with a
    /// `Content-Digest` (rows, a slice), read exactly and checked.
    async fn read_attested(
        &self,
        base: &str,
        etag: &str,
        object: &str,
        asked: Attested,
        len: u64,
    ) -> Result<(AlignedBuf, zt_format::Digest)> {
        let at = At {
            object: object.to_owned(),
            component: "data".to_owned(),
        };
        let mut url =
            reqwest::Url::parse(base).map_err(|e| Error::Protocol(format!("{base}: {e}")))?;
        url.path_segments_mut()
            .map_err(|()| Error::Protocol(format!("{base}: not a base URL")))?
            .extend(["objects", object, "data"]);
        url.query_pairs_mut()
            .append_pair(asked.key, &asked.value)
            .append_pair("v", etag.trim_matches('"'));
        let req = self.client.get(url.as_str());
        let resp = self.get_expecting(req, url.as_str(), asked.status).await?;
        let what = format!("{} {}", asked.key, asked.value);
        let claimed = resp
            .headers()
            .get("content-digest")
            .and_then(|v| v.to_str().ok())
            .and_then(content_digest_sha256)
            .ok_or_else(|| Error::Unverifiable {
                at: Some(at.clone()),
                message: format!("{url}: {at}: {what} came without a sha-256 Content-Digest"),
            })?;
        let mut buf = AlignedBuf::zeroed(len).map_err(|r| Error::corrupt(&at, r))?;
        let want = Want::Exact(0..len);
        self.read_body(resp, &want, buf.as_mut_slice()).await?;
        let mut h = zt_format::Hasher::new(zt_format::DigestAlgorithm::Sha256);
        h.update(buf.as_slice());
        let got = h.finish();
        if got.sha256() != Some(&claimed) {
            return Err(Error::corrupt(
                &at,
                format!(
                    "{what} do not match their Content-Digest (got {})",
                    got.as_str()
                ),
            ));
        }
        Ok((buf, got))
    }

    /// A synthesized component's bytes into `into` (exactly its length).
    async fn synthesized_bytes(
        &self,
        at: &At,
        from: &SynthesizedAt,
        into: &mut [u8],
    ) -> Result<()> {
        let key = (at.object.clone(), at.component.clone());
        match from {
            SynthesizedAt::Here(map) => {
                let b = map.get(&key).filter(|b| b.len() == into.len());
                let b = b.ok_or_else(|| {
                    Error::Protocol(format!("{}: {at} has no bytes of its length", self.url))
                })?;
                into.copy_from_slice(b);
                Ok(())
            }
            SynthesizedAt::Route(base) => {
                let mut url = reqwest::Url::parse(base)
                    .map_err(|e| Error::Protocol(format!("{base}: {e}")))?;
                url.path_segments_mut()
                    .map_err(|()| Error::Protocol(format!("{base}: not a base URL")))?
                    .extend(["objects", &at.object, &at.component]);
                let resp = self
                    .get_ok(self.client.get(url.as_str()), url.as_str())
                    .await?;
                let want = Want::Exact(0..into.len() as u64);
                self.read_body(resp, &want, into).await
            }
            SynthesizedAt::None => Err(Error::Protocol(format!(
                "{}: {at} is synthesized by the server, and this transport cannot reach it",
                self.url
            ))),
        }
    }
}

/// Components at most this long may share a request with neighbours.
const RUN_COMPONENT: u64 = 256 << 10;

/// The most bytes one request of neighbours spans.
const RUN_SPAN: u64 = SPLIT as u64;

/// The most bytes between two neighbours in one request (read and not
/// used: padding, or a component not asked for).
const RUN_GAP: u64 = 4 << 10;

/// `items` (in send order) cut into jobs, by their lengths: runs of
/// small components that follow one another in the same file, a little
/// apart at most, each fetched by one request (a file of thousands of
/// small tensors is otherwise a request each), and every other component
/// alone.
fn runs(items: &[(At, zt_format::Component)], component_cap: u64) -> Vec<usize> {
    // One over the cap goes alone, to be refused as such.
    let small = |c: &zt_format::Component| {
        c.length <= RUN_COMPONENT.min(component_cap)
            && c.length > 0
            && !c.synthesized
            && !c.is_transformed()
    };
    let mut jobs: Vec<usize> = Vec::new();
    let mut open: Option<(u64, u64, Option<&str>)> = None; // span start, end, file
    for (_, c) in items {
        let end = c.offset.saturating_add(c.length);
        let joins = open.is_some_and(|(start, last, file)| {
            small(c)
                && file == c.file.as_deref()
                && c.offset >= last
                && c.offset - last <= RUN_GAP
                && end - start <= RUN_SPAN
        });
        match jobs.last_mut() {
            Some(n) if joins => {
                *n += 1;
                if let Some(o) = open.as_mut() {
                    o.1 = end;
                }
            }
            _ => {
                jobs.push(1);
                open = small(c).then_some((c.offset, end, c.file.as_deref()));
            }
        }
    }
    jobs
}

/// The bytes a run's components lie in.
fn span(job: &[(At, zt_format::Component)]) -> std::ops::Range<u64> {
    let start = job.first().map_or(0, |(_, c)| c.offset);
    let end = job
        .last()
        .map_or(start, |(_, c)| c.offset.saturating_add(c.length));
    start..end
}

/// A verified component, ready for the consumer.
fn delivered(
    at: &At,
    seq: u64,
    c: &zt_format::Component,
    data: AlignedBuf,
    verification: crate::verify::Verification,
) -> Delivered {
    Delivered {
        object: at.object.clone(),
        component: at.component.clone(),
        seq,
        dtype: c.dtype,
        logical_type: c.logical_type.clone(),
        encoding: c.encoding,
        uncompressed_length: c.uncompressed_length,
        digest: c.digest.clone(),
        data,
        verification,
    }
}

/// The sha-256 value of a `Content-Digest` field (RFC 9530), if it has one.
fn content_digest_sha256(field: &str) -> Option<[u8; 32]> {
    use base64::Engine as _;
    field.split(',').find_map(|member| {
        let (alg, value) = member.trim().split_once('=')?;
        if !alg.trim().eq_ignore_ascii_case("sha-256") {
            return None;
        }
        let b64 = value.trim().strip_prefix(':')?.strip_suffix(':')?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        bytes.try_into().ok()
    })
}

/// What [`HttpSource::read_attested`] asks the component route for: the
/// query key and value, and the status that answers it.
#[derive(Debug)]
struct Attested {
    key: &'static str,
    value: String,
    status: StatusCode,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(offset: u64, length: u64, file: Option<&str>) -> (At, zt_format::Component) {
        let mut c = zt_format::Component::of_file(zt_format::DType::U8, offset, length);
        c.file = file.map(Into::into);
        let at = At {
            object: format!("o{offset}"),
            component: "data".to_owned(),
        };
        (at, c)
    }

    #[test]
    fn small_neighbours_share_a_request_and_nothing_else_does() {
        let k = 1024;
        let items = [
            // A run: 4 KiB apart at most.
            item(0, 100, None),
            item(100 + 4 * k, 100, None),
            // More than 4 KiB after the last: a new run.
            item(8 * k + 201, 100, None),
            item(8 * k + 301, 100, None),
            // Another file breaks it.
            item(8 * k + 401, 100, Some("b")),
            // A large one goes alone, and so does the next after it.
            item(9 * k, 300 * k, None),
            item(309 * k, 100, None),
            // A run ends before its span passes 4 MiB.
            item(4096 * k, 256 * k, None),
            item(4352 * k, 256 * k, None),
        ];
        let mut more: Vec<_> = items.to_vec();
        for i in 0..16 {
            more.push(item(4608 * k + i * 256 * k, 256 * k, None));
        }
        assert_eq!(runs(&items, u64::MAX), [2, 2, 1, 1, 1, 2]);
        let jobs = runs(&more, u64::MAX);
        assert!(jobs.iter().all(|&n| n <= 16), "{jobs:?}");
        assert_eq!(jobs.iter().sum::<usize>(), more.len());
        // Components over the cap go alone, to be refused alone.
        assert_eq!(runs(&items, 50), [1; 9]);
    }
}

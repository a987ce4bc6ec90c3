//! Writing a fetched selection as a valid v1.2 file, or a whole file of
//! another source (safetensors, GGUF) as a byte-identical copy.
//!
//! The output's name decides: `-o NAME.zt` (or any name that is not a
//! source's) writes a `.zt` file of the selected objects, whatever the
//! source; `-o NAME.safetensors` of a safetensors file (`.gguf` of a GGUF
//! file) writes the served file itself, byte for byte: every component
//! verified on arrival and written at its own offset, the bytes between
//! them (headers, padding) read by Range, and the header of the result
//! read back and checked against the manifest before the rename. A copy
//! is of the whole file (no `--select`); over ztp/1 the bytes between
//! components come as a `get` with `ranges` (the server's feature).
//!
//! The output is laid out before the first byte arrives (components in
//! send order, 64-byte aligned; those of 1 MiB or more on 4096-byte
//! boundaries, so they can be written, and later read, with direct I/O),
//! written to `OUT.part` as components complete (each verified on
//! arrival; see `part.rs`), and renamed to `OUT` only once the
//! finished file is durable and validates. Progress is kept in `OUT.part.journal`:
//! a header line naming the remote ETag and selection, then one line per
//! component written. An interrupted fetch resumes from the journal
//! (components already written are re-verified, not re-fetched); if the
//! remote ETag changed, it starts over. A digest mismatch removes the
//! partial output, since no resume can fix it.
//!
//! A `.zt` file carries only the digests the format names (sha256,
//! crc32c): a component the server vouches for with blake3 is verified
//! against it on arrival and written with the crc32c of those same bytes.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures_util::FutureExt as _;
use zt_format::{Digest, DigestAlgorithm, Manifest, ReadOptions, Source, ZtFile};

use crate::blocking::{blocking, StopOnDrop};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::journal::{Entries, Journal};
use crate::part::{PartWriter, Write};
use crate::remote::select_from;

/// What a finished fetch wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub path: PathBuf,
    pub objects: usize,
    /// Component bytes received in this run (resumed ones excluded).
    pub bytes: u64,
    /// Components found complete in the journal and re-verified.
    pub resumed: usize,
}

/// Called after each component with (object, bytes received so far, bytes total).
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

fn part_paths(out: &Path) -> (PathBuf, PathBuf) {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (
        out.with_file_name(format!("{name}.part")),
        out.with_file_name(format!("{name}.part.journal")),
    )
}

/// Which layout ([`zt_format::layout::single_file`]) a journal's part file follows: a part file laid out
/// by another one is started over, so no stale bytes are left in what is
/// now padding.
const LAYOUT: u32 = 2;

fn header_line(etag: &str, select: &[String], kind: Output) -> String {
    let copy = matches!(kind, Output::Copy(_));
    serde_json::json!({ "etag": etag, "select": select, "layout": LAYOUT, "copy": copy })
        .to_string()
}

/// `path` opened to read, if it is the fetch's own
/// ([`crate::own::open_own`]): anything else vouches for nothing.
fn own_file(path: &Path) -> Option<File> {
    let mut read = OpenOptions::new();
    read.read(true);
    crate::own::open_own(path, &mut read, rustix::fs::OFlags::empty()).ok()
}

/// The journal's components whose bytes in `part` still match their
/// digest, each read in pieces of at most [`RECHECK_CHUNK`] bytes (memory
/// stays bounded whatever a component's size), with the digest each is to
/// be written with where that is not the served one ([`rewritten`]). A
/// component without a digest cannot be vouched for and is fetched again.
fn still_intact(
    part: &Path,
    local: &Manifest,
    journal: Entries,
    kind: Output,
    stop: &AtomicBool,
) -> Done {
    let Some(f) = own_file(part) else {
        return Done::new();
    };
    let mut buf = vec![0u8; RECHECK_CHUNK];
    journal
        .into_iter()
        .filter_map(|(o, r)| {
            let c = local.component(&o, &r)?;
            let (digest, algorithm) = c
                .digest
                .as_ref()
                .and_then(|d| d.algorithm().map(|a| (d, a)))?;
            let mut hasher = zt_format::Hasher::new(algorithm);
            let mut written = rewritten(c, kind).map(zt_format::Hasher::new);
            let (mut at, end) = (c.offset, c.offset.saturating_add(c.length));
            while at < end {
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
                let n = usize::try_from(end - at).map_or(RECHECK_CHUNK, |n| n.min(RECHECK_CHUNK));
                let piece = buf.get_mut(..n)?;
                f.read_exact_at(piece, at).ok()?;
                hasher.update(piece);
                if let Some(w) = &mut written {
                    w.update(piece);
                }
                at += n as u64;
            }
            digest.compare(&hasher.finish()).ok()?;
            Some(((o, r), written.map(zt_format::Hasher::finish)))
        })
        .collect()
}

/// The components in the output so far, and the digest each is to be
/// written with when it is not the served one (see [`rewritten`]).
type Done = HashMap<(String, String), Option<Digest>>;

/// The algorithm a component is written under in a `.zt` output when the
/// served digest's cannot be (blake3, computed by the server: the format
/// names sha256 and crc32c): crc32c, computed from the bytes that were
/// verified against the served digest. A copy carries no digests.
fn rewritten(c: &zt_format::Component, kind: Output) -> Option<DigestAlgorithm> {
    let served = c.digest.as_ref()?.algorithm()?;
    (kind == Output::Zt && !served.in_zt_files()).then_some(DigestAlgorithm::Crc32c)
}

/// The most bytes [`still_intact`] reads at once.
const RECHECK_CHUNK: usize = 4 << 20;

/// Components already arrived that go to disk in one blocking write, at
/// most: this many, or past this many bytes.
const BATCH_COMPONENTS: usize = 256;
const BATCH_BYTES: usize = 8 << 20;

/// What [`fetch_to_file`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    /// A v1.2 `.zt` file of the selected objects.
    Zt,
    /// The served file itself, byte for byte.
    Copy(Source),
}

/// The output `out`'s name asks for, given the served file's `source`.
fn output_kind(out: &Path, source: Source, select: &[String], url: &str) -> Result<Output> {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match zt_format::source::by_name(&name) {
        Some(Source::SafetensorsIndex) if source == Source::SafetensorsIndex => Err(Error::Usage(format!(
            "{}: a copy of a sharded checkpoint (its index and shards) is not written yet; fetch it as one .zt file (-o NAME.zt), or fetch each shard's URL as a copy",
            out.display()
        ))),
        Some(s) if s == source && s != Source::Zt => {
            if select.is_empty() {
                Ok(Output::Copy(s))
            } else {
                Err(Error::Usage(format!("{}: a copy of a {s} file is the whole file; write a selection as a .zt file (-o NAME.zt)", out.display())))
            }
        }
        Some(Source::Zt) | None => Ok(Output::Zt),
        Some(other) => Err(Error::Usage(format!(
            "{}: names a {other} file, but {url} is a {source} file: name the output after its source for a byte-identical copy, or .zt for a .zt file",
            out.display()
        ))),
    }
}

/// Fetches `select` from `client` into `out`: a `.zt` file, or a
/// byte-identical copy when `out` is named after the served file's source
/// (see the module docs).
pub async fn fetch_to_file(
    client: &Client,
    select: &[String],
    out: &Path,
    progress: Progress<'_>,
) -> Result<Written> {
    fetch_version_to_file(client, select, out, progress, None).await
}

/// [`fetch_to_file`] of the version `version` names (an ETag) when it
/// is given: a file found at another refuses the fetch as changed.
pub(crate) async fn fetch_version_to_file(
    client: &Client,
    select: &[String],
    out: &Path,
    progress: Progress<'_>,
    version: Option<&str>,
) -> Result<Written> {
    let (part, journal) = part_paths(out);
    let remote = client.manifest_of(select).await?;
    let etag = remote.etag;
    if let Some(want) = version.filter(|want| *want != etag) {
        return Err(Error::Changed {
            url: client.url.clone(),
            detail: format!("its ETag is {etag}, not {want} as expected"),
        });
    }
    let kind = output_kind(out, remote.manifest.source, select, &client.url)?;
    let (local, blob_end) = match kind {
        Output::Zt => {
            let selected =
                select_from(&remote.manifest, select).map_err(|e| e.within(&client.url))?;
            let laid = zt_format::layout::single_file(&selected);
            (laid.manifest, laid.blob_end)
        }
        Output::Copy(_) => {
            // A transport that cannot carry the bytes between components
            // fails here, before a byte moves.
            client.read_ranges(&[], &etag).await?;
            (crate::copy::in_place(&remote.manifest), remote.size)
        }
    };
    let header = header_line(&etag, select, kind);
    let local = Arc::new(local);
    // The objects `select` selects, as the server counts them.
    let selected = match kind {
        Output::Zt => local.objects.len(),
        Output::Copy(_) => remote.manifest.objects.len(),
    };

    // Opening, reading back and checking again what the journal vouches
    // for (up to the whole file) on a blocking thread, never the runtime's.
    // Stopped with the fetch, so the journal's lock goes with it.
    let stop = StopOnDrop::default();
    let (mut writer, journal, mut done) = {
        let (part, journal, local) = (part.clone(), journal.clone(), Arc::clone(&local));
        let (direct_io, stop) = (client.options.direct_io, stop.flag());
        blocking(move || {
            let resume = Resume {
                local: &local,
                kind,
                stop: &stop,
            };
            prepare(&part, &journal, &header, resume, direct_io)
        })
        .await?
    };
    let resumed = done.len();
    tracing::debug!(part = %part.display(), direct_io = writer.is_direct(), "writing");

    // Objects still missing any component are fetched whole, asked for
    // in send order (layer 0 first); a fetch of all the selection asks
    // for the selection itself (the whole file, for a copy: which holds
    // objects a copy does not write, such as GGUF's synthesized ones).
    let mut asked = HashSet::new();
    let missing: Vec<&str> = zt_format::send_order(&local, &[])
        .into_iter()
        .filter(|(o, r, _)| !done.contains_key(&((*o).to_owned(), (*r).to_owned())))
        .filter_map(|(o, _, _)| asked.insert(o).then_some(o))
        .collect();
    let requests = zt_format::select::requests(select, &missing, selected);
    let total: u64 = local.objects.values().map(|o| o.stored_bytes()).sum();
    let mut got: u64 = done
        .keys()
        .filter_map(|(o, r)| local.component(o, r))
        .map(|c| c.length)
        .sum();
    let mut received = 0u64;
    let result: Result<()> = async {
        for request in &requests {
            let ahead = client.options.write_ahead;
            let mut fetch = client.fetch_bounded(request, Some(&etag), ahead).await?;
            while let Some(item) = fetch.next().await {
                // What has arrived by now goes to disk in one blocking
                // write: small components come in bursts.
                // A failure after some have arrived ends the fetch once
                // those are written: a resume need not fetch them again.
                let mut batch = vec![item?];
                let mut bytes = batch.iter().map(|d| d.data.len()).sum::<usize>();
                let mut failed = None;
                while bytes < BATCH_BYTES && batch.len() < BATCH_COMPONENTS {
                    match fetch.next().now_or_never() {
                        Some(Some(Ok(d))) => {
                            bytes += d.data.len();
                            batch.push(d);
                        }
                        Some(Some(Err(e))) => {
                            failed = Some(e);
                            break;
                        }
                        Some(None) | None => break,
                    }
                }
                let mut writes = Vec::with_capacity(batch.len());
                let mut keys: Vec<((String, String), u64)> = Vec::with_capacity(batch.len());
                for d in batch {
                    let key = (d.object.clone(), d.component.clone());
                    if done.contains_key(&key) {
                        continue;
                    }
                    let c = local.component(&d.object, &d.component).ok_or_else(|| {
                        Error::Protocol(format!("{}: {} was not asked for", client.url, d.at()))
                    })?;
                    writes.push(Write {
                        data: d.data,
                        offset: c.offset,
                        hash: rewritten(c, kind),
                        done: Some(key.clone()),
                    });
                    keys.push((key, c.length));
                }
                let written = writer.write_all(writes).await?;
                for ((key, length), (buf, digest)) in keys.into_iter().zip(written) {
                    client.recycle(buf);
                    got += length;
                    received += length;
                    progress(&key.0, got, total);
                    done.insert(key, digest);
                }
                if let Some(e) = failed {
                    return Err(e);
                }
            }
        }
        // Every component must be in: a request the server ended early
        // (a component it refused, a stream it reset) is not a file.
        let undelivered: Vec<String> = local
            .objects
            .iter()
            .flat_map(|(o, obj)| {
                obj.components
                    .keys()
                    .filter(|r| !done.contains_key(&(o.to_owned(), (*r).to_owned())))
                    .map(move |r| format!("object {o:?}, component {r:?}"))
            })
            .collect();
        if let Some(first) = undelivered.first() {
            return Err(Error::Transport(format!(
                "{}: the fetch ended with {} components undelivered, {first} first",
                client.url,
                undelivered.len()
            )));
        }
        if let Output::Copy(source) = kind {
            // The bytes between components (headers, padding), then the
            // header read back and checked before the rename.
            let gaps = crate::copy::gaps(&local, blob_end);
            let reads = crate::copy::reads(&gaps);
            let spans: Vec<_> = reads.iter().map(|(span, _)| span.clone()).collect();
            let bytes = client.read_ranges(&spans, &etag).await?;
            let mut writes = Vec::new();
            for ((span, within), bytes) in reads.iter().zip(bytes) {
                for gap in *within {
                    let at = |x: u64| usize::try_from(x - span.start).unwrap_or(usize::MAX);
                    let piece = bytes.get(at(gap.start)..at(gap.end)).ok_or_else(|| {
                        Error::Transport(format!(
                            "{}: bytes {span:?} arrived short ({} bytes)",
                            client.url,
                            bytes.len()
                        ))
                    })?;
                    let buf = zt_format::AlignedBuf::copy_from(piece).map_err(|r| {
                        Error::io(
                            format!("buffering bytes {gap:?}"),
                            std::io::Error::other(r.to_string()),
                        )
                    })?;
                    writes.push(Write {
                        data: buf,
                        offset: gap.start,
                        hash: None,
                        done: None,
                    });
                    if writes.len() >= BATCH_COMPONENTS {
                        writer.write_all(std::mem::take(&mut writes)).await?;
                    }
                }
            }
            writer.write_all(writes).await?;
            writer.finish_copy(blob_end).await?;
            let (part, local) = (part.clone(), Arc::clone(&local));
            let (cap, url) = (client.options.manifest_cap, client.url.clone());
            return blocking(move || crate::copy::check_copy(&part, source, &local, cap, &url))
                .await;
        }
        // Manifest and footer, then a full check before the rename.
        let mut written = Manifest::clone(&local);
        for ((o, r), digest) in &done {
            let c = written
                .objects
                .get_mut(o)
                .and_then(|obj| obj.components.get_mut(r));
            if let (Some(d), Some(c)) = (digest, c) {
                c.digest = Some(d.clone());
            }
        }
        writer
            .finish(zt_format::layout::tail(&written), blob_end)
            .await?;
        // Every component's digest was checked on arrival (or on resume);
        // re-reading the file checks the structure we wrote, not the bytes
        // again (decoding its manifest: on a blocking thread).
        let skip = ReadOptions {
            verify: zt_format::Verify::Skip,
            ..ReadOptions::default()
        };
        let part = part.clone();
        blocking(move || {
            ZtFile::open_with(&part, skip)
                .map(drop)
                .map_err(Error::from)
        })
        .await
    }
    .await;
    let objects = local.objects.len();
    let (part, out) = (part.clone(), out.to_owned());
    blocking(move || match result {
        Ok(()) => {
            std::fs::rename(&part, &out)
                .map_err(|e| Error::io(format!("renaming into {}", out.display()), e))?;
            journal.remove();
            Ok(Written {
                path: out,
                objects,
                bytes: received,
                resumed,
            })
        }
        Err(e) => {
            if matches!(e, Error::Corrupt { .. } | Error::Unverifiable { .. }) {
                // Corrupt or unverifiable data: nothing worth resuming.
                let _ = std::fs::remove_file(&part);
                journal.remove();
            }
            Err(e)
        }
    })
    .await
}

/// What a resumed fetch checks again: the output's layout, its kind, and
/// a flag that stops the check.
struct Resume<'a> {
    local: &'a Manifest,
    kind: Output,
    stop: &'a AtomicBool,
}

/// Opens the part file and journal of a fetch (blocking): what the journal
/// vouches for, if it is this fetch's, checked again, and the journal
/// started over when nothing is kept (the part file removed first, when
/// the journal is not this fetch's). A part file that cannot be opened,
/// or a journal that cannot be started, leaves no journal this call made.
fn prepare(
    part: &Path,
    journal: &Path,
    header: &str,
    resume: Resume<'_>,
    direct_io: bool,
) -> Result<(PartWriter, Arc<Journal>, Done)> {
    let (journal, vouched) = Journal::open(journal, header)?;
    let journal = Arc::new(journal);
    let done = match vouched {
        Some(prev) => still_intact(part, resume.local, prev, resume.kind, resume.stop),
        None => {
            let _ = std::fs::remove_file(part);
            Done::new()
        }
    };
    let made = PartWriter::open(part, direct_io, Arc::clone(&journal)).and_then(|writer| {
        if done.is_empty() {
            journal.start(header)?;
        }
        Ok(writer)
    });
    let writer = made.inspect_err(|_| journal.forget_if_fresh())?;
    Ok((writer, journal, done))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

    /// A resumed fetch keeps only the journaled components whose bytes in
    /// the part file still match their digest.
    #[test]
    fn resume_keeps_only_components_that_still_verify() {
        let mut w = Writer::new(Vec::new(), "part.zt").unwrap();
        let opts = StoreOptions {
            digest: Some(DigestAlgorithm::Sha256),
            ..StoreOptions::default()
        };
        let (a, b) = (vec![7u8; 100_000], vec![9u8; 5_000_000]);
        w.add_dense("a", &[100_000], DType::U8, &a, opts).unwrap();
        w.add_dense("b", &[5_000_000], DType::U8, &b, opts).unwrap();
        let bytes = w.finish().unwrap();
        let file = ZtFile::from_bytes("part.zt", &bytes, ReadOptions::default()).unwrap();
        let m = file.manifest().clone();
        let path = std::env::temp_dir().join(format!("resume-{}.part", std::process::id()));
        let mut damaged = bytes.clone();
        // One byte of b's last piece (past the first read of RECHECK_CHUNK).
        let at = m.component("b", "data").unwrap().offset + 4_999_999;
        damaged[at as usize] ^= 1;
        std::fs::write(&path, &damaged).unwrap();
        let journal: HashSet<(String, String)> = [("a", "data"), ("b", "data")]
            .into_iter()
            .map(|(o, r)| (o.to_owned(), r.to_owned()))
            .collect();
        let keys = |r: Done| r.into_keys().collect::<HashSet<_>>();
        // The check of the whole journal, stopped from the start or not.
        let check = |stop: bool| {
            still_intact(
                &path,
                &m,
                journal.clone(),
                Output::Zt,
                &AtomicBool::new(stop),
            )
        };
        let kept = keys(check(false));
        assert_eq!(kept, HashSet::from([("a".to_owned(), "data".to_owned())]));
        std::fs::write(&path, &bytes).unwrap();
        let stopped = check(true);
        assert!(stopped.is_empty(), "a stopped check vouches for nothing");
        let all = check(false);
        assert!(
            all.values().all(Option::is_none),
            "sha256 is written as it is"
        );
        assert_eq!(keys(all), journal);
        std::fs::remove_file(&path).unwrap();
        assert!(check(false).is_empty(), "no part file");
    }

    /// A resumed component the server vouched for with blake3 is checked
    /// against it and comes back with the crc32c it is to be written with.
    #[test]
    fn resumed_blake3_components_come_back_with_their_crc32c() {
        let data = vec![5u8; 300_000];
        let mut w = Writer::new(Vec::new(), "part.zt").unwrap();
        w.add_dense("a", &[300_000], DType::U8, &data, StoreOptions::default())
            .unwrap();
        let bytes = w.finish().unwrap();
        let file = ZtFile::from_bytes("part.zt", &bytes, ReadOptions::default()).unwrap();
        let vouched = |bytes: &[u8]| {
            let mut m = file.manifest().clone();
            let c = m
                .objects
                .get_mut("a")
                .and_then(|o| o.components.get_mut("data"));
            c.unwrap().digest = Some(DigestAlgorithm::Blake3.digest(bytes));
            m
        };
        let m = vouched(&data);
        let path = std::env::temp_dir().join(format!("resume-b3-{}.part", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let journal = HashSet::from([("a".to_owned(), "data".to_owned())]);
        let got = still_intact(
            &path,
            &m,
            journal.clone(),
            Output::Zt,
            &AtomicBool::new(false),
        );
        let crc = DigestAlgorithm::Crc32c.digest(&data);
        let key = ("a".to_owned(), "data".to_owned());
        assert_eq!(got.get(&key), Some(&Some(crc)));
        let copy = still_intact(
            &path,
            &m,
            journal.clone(),
            Output::Copy(Source::Zt),
            &AtomicBool::new(false),
        );
        assert_eq!(copy.get(&key), Some(&None), "a copy carries no digests");
        let m = vouched(b"other bytes");
        assert!(
            still_intact(&path, &m, journal, Output::Zt, &AtomicBool::new(false)).is_empty(),
            "checked by blake3"
        );
        std::fs::remove_file(&path).unwrap();
    }
}

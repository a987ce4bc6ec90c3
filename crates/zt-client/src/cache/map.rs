//! Cached components handed over without a copy: each entry of an object
//! mapped private and copy-on-write ([`PrivateMap`]), checked through the
//! mapping against its seal (`seal.rs`). Blocking: callers run it on a
//! blocking thread.

use std::time::SystemTime;

use zt_format::{Component, Encoding, PrivateMap};

use super::{seal, Cache, Scope};
use crate::remote::Remote;

/// One component of an object, mapped from the cache.
#[derive(Debug)]
pub struct Mapped {
    pub role: String,
    pub component: Component,
    pub map: PrivateMap,
}

impl Cache {
    /// Every component of `object` (of `remote`, read from `url`) mapped
    /// from the cache, each checked against its seal: `None` unless
    /// every one is cached and raw (a zstd component must be decoded into
    /// memory anyway); `Some(Err(why))` when an entry failed its check (it
    /// is removed, and the caller fetches the object).
    pub fn map_object(
        &self,
        url: &str,
        remote: &Remote,
        object: &str,
    ) -> Option<Result<Vec<Mapped>, String>> {
        let obj = remote.manifest.objects.get(object)?;
        let mut keyed = Vec::with_capacity(obj.components.len());
        for (role, c) in &obj.components {
            if c.encoding != Encoding::Raw {
                return None;
            }
            let scope = Scope {
                url,
                etag: &remote.etag,
                object,
                component: role,
            };
            let key = c.digest.as_ref().and_then(|d| Cache::key(d, scope))?;
            keyed.push((role, c, key));
        }
        let mut out = Vec::with_capacity(keyed.len());
        for (role, c, key) in keyed {
            let path = self.dir().join(&key.rel);
            let file = zt_format::open_regular(&path).ok()?;
            let checked = file
                .metadata()
                .map_err(|e| e.to_string())
                .and_then(|m| match m.len() {
                    n if n != c.length => Err(format!("{n} bytes where {} were expected", c.length)),
                    _ if !seal::private(&m) => Err(
                        "not this user's alone (another owner, writable by others, or linked elsewhere): not mapped"
                            .to_owned(),
                    ),
                    _ => PrivateMap::open(&file)
                        .map(|map| (map, seal::check_for(&file, &m, &key.digest)))
                        .map_err(|e| e.to_string()),
                })
                .and_then(|(map, check)| {
                    check
                        .digest
                        .check(map.as_slice())
                        .map_err(|rule| format!("{}: {rule}", rule.name()))?;
                    if !check.sealed {
                        // Hashed with its digest just now: sealed for next time.
                        seal::put(&file, &key.digest, map.as_slice());
                    }
                    Ok(map)
                });
            match checked {
                Ok(map) => {
                    let _ = file.set_modified(SystemTime::now());
                    out.push(Mapped {
                        role: role.to_string(),
                        component: c.clone(),
                        map,
                    });
                }
                Err(why) => {
                    let _ = std::fs::remove_file(&path);
                    return Some(Err(format!("cache entry {}: {why}", path.display())));
                }
            }
        }
        Some(Ok(out))
    }
}

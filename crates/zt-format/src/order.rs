//! The send order of a (filtered) manifest: objects named explicitly first, then the
//! layer rule (`crate::layer_order`, keyed by where each object's data
//! begins), and within an object, components by offset. The QUIC server
//! sends in this order and the HTTP client fetches in it.

use std::collections::HashSet;

use crate::{layer_order, Component, Manifest};

/// `(object, component role, component)` for every object of `m`, in send order.
pub fn send_order<'m>(
    m: &'m Manifest,
    explicit: &[String],
) -> Vec<(&'m str, &'m str, &'m Component)> {
    let mut first: HashSet<&str> = HashSet::new();
    let mut objects: Vec<&'m str> = Vec::with_capacity(m.objects.len());
    for name in explicit {
        if let Some((k, _)) = m.objects.get_key_value(name.as_str()) {
            if first.insert(k) {
                objects.push(k);
            }
        }
    }
    let rest: Vec<(&'m str, u64)> = m
        .objects
        .iter()
        .filter(|(k, _)| !first.contains(k))
        .map(|(k, o)| (k, o.first_offset().unwrap_or(0)))
        .collect();
    objects.extend(
        layer_order(&rest)
            .into_iter()
            .filter_map(|i| rest.get(i).map(|r| r.0)),
    );
    let mut out = Vec::new();
    for name in objects {
        let Some(obj) = m.objects.get(name) else {
            continue;
        };
        let mut comps: Vec<(&'m str, &'m Component)> = obj.components.iter().collect();
        comps.sort_by_key(|(_, c)| c.offset);
        out.extend(comps.into_iter().map(|(r, c)| (name, r, c)));
    }
    out
}

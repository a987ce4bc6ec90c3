//! The send order of a selection: objects named explicitly first, then the
//! layer rule (`zt_format::layer_order`, keyed by where each object's data
//! begins), and within an object, components by offset. The QUIC server
//! sends in this order and the HTTP client fetches in it.

use zt_format::{layer_order, Component, Manifest};

/// `(object, component role, component)` in send order.
pub fn send_order<'m>(
    m: &'m Manifest,
    selected: &[&str],
    explicit: &[String],
) -> Vec<(&'m str, &'m str, &'m Component)> {
    let mut objects: Vec<&'m str> = Vec::with_capacity(selected.len());
    for name in explicit {
        if let Some((k, _)) = m.objects.get_key_value(name.as_str()) {
            if selected.contains(&k.as_str()) && !objects.contains(&k.as_str()) {
                objects.push(k);
            }
        }
    }
    let rest: Vec<(&'m str, u64)> = m
        .objects
        .iter()
        .filter(|(k, _)| selected.contains(&k.as_str()) && !objects.contains(&k.as_str()))
        .map(|(k, o)| (k.as_str(), o.first_offset().unwrap_or(0)))
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
        let mut comps: Vec<(&'m str, &'m Component)> = obj
            .components
            .iter()
            .map(|(r, c)| (r.as_str(), c))
            .collect();
        comps.sort_by_key(|(_, c)| c.offset);
        out.extend(comps.into_iter().map(|(r, c)| (name, r, c)));
    }
    out
}

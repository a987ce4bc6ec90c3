//! The layer rule: which transformer layer an object belongs to, and the
//! order that sends (or writes) layer 0 first. `zt pack` writes blobs in this
//! order and the QUIC server sends streams in it, so both use this function.

/// Segments after which a number names a layer.
const LAYER_WORDS: [&str; 5] = ["layers", "layer", "h", "blocks", "block"];
/// Segments after which a number is an index, but not a layer.
const NOT_LAYER_WORDS: [&str; 1] = ["experts"];

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The layer index of an object name: the number after a segment named
/// `layers`, `layer`, `h`, `blocks` or `block`; otherwise the first all-digit
/// segment that does not follow `experts`. Segments split on `.` and `/`.
///
/// ```
/// use zt_format::layer_index;
/// assert_eq!(layer_index("model.layers.12.mlp.up_proj.weight"), Some(12));
/// assert_eq!(layer_index("encoder.layer.3.attention.self.query.weight"), Some(3));
/// assert_eq!(layer_index("transformer.h.7.attn.c_attn.weight"), Some(7));
/// assert_eq!(layer_index("mlp.experts.3.w1"), None);
/// assert_eq!(layer_index("lm_head.weight"), None);
/// ```
pub fn layer_index(name: &str) -> Option<u64> {
    let segs: Vec<&str> = name.split(['.', '/']).collect();
    let after = |words: &[&str]| {
        segs.windows(2).find_map(|w| match w {
            [a, b] if words.contains(a) && is_number(b) => b.parse().ok(),
            _ => None,
        })
    };
    if let Some(n) = after(&LAYER_WORDS) {
        return Some(n);
    }
    segs.iter().enumerate().find_map(|(i, s)| {
        let prev = i.checked_sub(1).and_then(|p| segs.get(p));
        let excluded = prev.is_some_and(|p| NOT_LAYER_WORDS.contains(p));
        (is_number(s) && !excluded)
            .then(|| s.parse().ok())
            .flatten()
    })
}

/// Orders items for streaming: objects without a layer that come before the
/// first layered object (by `position`) go first, then layers in ascending
/// order, then the remaining unlayered objects. Ties keep `position` order.
/// `position` is the input order for `zt pack` and the file offset for the
/// server. Returns indices into `items`.
pub fn layer_order<S: AsRef<str>>(items: &[(S, u64)]) -> Vec<usize> {
    let layers: Vec<Option<u64>> = items.iter().map(|(n, _)| layer_index(n.as_ref())).collect();
    let first_layered = items
        .iter()
        .zip(&layers)
        .filter(|(_, l)| l.is_some())
        .map(|((_, p), _)| *p)
        .min();
    let mut idx: Vec<usize> = (0..items.len()).collect();
    idx.sort_by_key(|&i| {
        let pos = items.get(i).map_or(0, |(_, p)| *p);
        let (group, layer) = match layers.get(i).copied().flatten() {
            Some(l) => (1u8, l),
            None if first_layered.is_some_and(|f| pos < f) => (0, 0),
            None if first_layered.is_none() => (0, 0),
            None => (2, 0),
        };
        (group, layer, pos, i)
    });
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_digit_segment_is_the_fallback() {
        assert_eq!(layer_index("blocks.2.attn"), Some(2));
        assert_eq!(layer_index("down.5.weight"), Some(5));
        assert_eq!(layer_index("model.layers.4.mlp.experts.7.w"), Some(4));
        assert_eq!(layer_index("experts.7.w"), None);
        assert_eq!(layer_index("a/layer/9/b"), Some(9));
        assert_eq!(layer_index("layers.x1.w"), None);
    }

    #[test]
    fn unlayered_objects_go_around_the_layers() {
        let items = [
            ("model.layers.1.w", 10),
            ("model.embed_tokens.weight", 0),
            ("model.layers.0.w", 30),
            ("model.norm.weight", 40),
            ("lm_head.weight", 50),
            ("model.layers.0.b", 20),
        ];
        let order: Vec<&str> = layer_order(&items)
            .into_iter()
            .map(|i| items.get(i).map_or("", |x| x.0))
            .collect();
        assert_eq!(
            order,
            [
                "model.embed_tokens.weight",
                "model.layers.0.b",
                "model.layers.0.w",
                "model.layers.1.w",
                "model.norm.weight",
                "lm_head.weight"
            ]
        );
    }
}

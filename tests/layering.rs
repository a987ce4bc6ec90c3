//! The workspace's layering, checked on the real dependency graph
//! (`cargo tree -e normal`): a loader never compiles the server, the `zt`
//! tool never compiles the server, and the format and protocol crates stay
//! free of sockets and runtimes.

use std::collections::BTreeSet;
use std::process::Command;

/// Every crate in `package`'s normal (non-dev, non-build) dependency
/// tree, as `name vVERSION`.
fn tree(package: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["-p", package, "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split(" (").next().unwrap_or(l).to_owned())
        .collect()
}

fn assert_free_of(package: &str, banned: &[&str]) {
    let deps = tree(package);
    assert!(
        deps.iter().any(|d| d.starts_with(&format!("{package} v"))),
        "cargo tree listed {deps:?}"
    );
    // `name` bans every version, `name v0.7` one line of versions.
    let found: Vec<&String> = deps
        .iter()
        .filter(|d| {
            banned
                .iter()
                .any(|b| d.starts_with(&format!("{b} ")) || d.starts_with(&format!("{b}.")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "{package} depends on {found:?}; `cargo tree -p {package} -e normal -i CRATE` shows the path"
    );
}

/// The server's crates. reqwest (the client's HTTP transport) brings
/// tower-http 0.6 for its redirect policy and tokio-rustls for its TLS;
/// the server's tower-http is 0.7, and that one must stay out.
const SERVER: &[&str] = &[
    "ztserve",
    "axum",
    "tower-http v0.7",
    "notify",
    "rcgen",
    "tracing-subscriber",
    "toml",
    "rlimit",
];
const COMMAND_LINE: &[&str] = &["clap", "indicatif", "zt-cli"];

#[test]
fn the_client_compiles_no_server_or_command_line_crate() {
    let banned: Vec<&str> = SERVER.iter().chain(COMMAND_LINE).copied().collect();
    assert_free_of("zt-client", &banned);
}

#[test]
fn the_zt_tool_compiles_no_server_crate() {
    assert_free_of("zt-cli", SERVER);
}

#[test]
fn the_format_and_protocol_crates_have_no_runtime_or_sockets() {
    let io = [
        "tokio",
        "quinn",
        "reqwest",
        "socket2",
        "rustls",
        "ztserve",
        "zt-client",
    ];
    assert_free_of("zt-format", &io);
    assert_free_of("ztp-proto", &io);
    // Ingest is offline work on files: no runtime, no network, no server.
    let mut ingest: Vec<&str> = io.to_vec();
    ingest.extend(COMMAND_LINE);
    assert_free_of("zt-ingest", &ingest);
}

/// Issue 27: no two modules import each other, in the daemon, the client
/// and the format crate. A module is a file; an import is any path it
/// names through `crate::`, `super::` or `self::` (in `use` trees, braces
/// expanded, and in code), or a child module by its bare name, followed
/// through re-exports (`catalog::Identity` is `store::identity`'s). A
/// module's ancestors and descendants are its own: only other branches
/// count. Test modules (after `#[cfg(test)]`) are left out.
#[test]
fn no_two_modules_import_each_other() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in ["src", "crates/zt-client/src", "crates/zt-format/src"] {
        let modules = modules_of(&root.join(src));
        assert!(modules.len() > 10, "{src}: {} modules found", modules.len());
        let edges = imports(&modules);
        let mutual: Vec<String> = edges
            .iter()
            .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())))
            .map(|(a, b)| format!("{} <-> {}", a.join("::"), b.join("::")))
            .collect();
        assert!(
            mutual.is_empty(),
            "{src}: modules that import each other: {mutual:?}"
        );
    }
}

/// Issue 27: the daemon's layers (the folders of `src/server`, and its
/// leaf modules such as `families`) depend one way: no two import each
/// other, whatever modules inside them the imports name. `server` itself
/// (`State` and `run`, which wire every layer together) is left out.
#[test]
fn no_two_layers_of_the_daemon_import_each_other() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules_of(&root);
    let layer = |m: &Module| match m.as_slice() {
        [server, layer, ..] if server == "server" => Some(layer.clone()),
        _ => None,
    };
    let mut edges = BTreeSet::new();
    for (a, b) in imports(&modules) {
        if let (Some(x), Some(y)) = (layer(&a), layer(&b)) {
            if x != y {
                edges.insert((x, y));
            }
        }
    }
    let mutual: Vec<String> = edges
        .iter()
        .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect();
    assert!(
        edges.len() > 10,
        "{} edges between layers found",
        edges.len()
    );
    assert!(
        mutual.is_empty(),
        "layers that import each other: {mutual:?}"
    );
}

/// The daemon holds no thread across I/O it waits for: no `block_on`
/// bridging blocking code to the runtime, no blocking send, receive or
/// lock on a channel or mutex of the runtime's (what a slow client or a
/// slow store would hold a blocking-pool thread on). The fuzzing harness,
/// which drives the router from outside a runtime, is the one exception.
#[test]
fn the_daemon_holds_no_thread_on_the_runtime() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server");
    let banned = [
        "block_on(",
        "blocking_send(",
        "blocking_recv(",
        "blocking_lock(",
        "Handle::current(",
    ];
    let modules = modules_of(&root);
    assert!(modules.len() > 10, "{} modules found", modules.len());
    let mut found = Vec::new();
    for (module, (file, _)) in &modules {
        if file.ends_with("http/fuzz.rs") {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).expect("reading a module"));
        for b in banned.iter().filter(|b| code.contains(*b)) {
            found.push(format!("{}: {b}", module.join("::")));
        }
    }
    assert!(
        found.is_empty(),
        "blocking bridges in the daemon: {found:?}"
    );
}

type Module = Vec<String>;

/// Every module under `dir`, by path (`a/b.rs` and `a/b/mod.rs` are `a::b`),
/// with its file and whether it is a directory module.
fn modules_of(
    dir: &std::path::Path,
) -> std::collections::BTreeMap<Module, (std::path::PathBuf, bool)> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().map(Result::unwrap) {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = path.strip_prefix(dir).unwrap().with_extension("");
            let mut parts: Module = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let is_dir = matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            );
            if is_dir {
                parts.pop();
            }
            out.insert(parts, (path, is_dir));
        }
    }
    out
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let (head, mut depth, mut close) = (&tree[..open], 0, tree.len());
    for (i, c) in tree.char_indices().skip(open) {
        depth += i32::from(c == '{') - i32::from(c == '}');
        if depth == 0 {
            close = i;
            break;
        }
    }
    let (mut parts, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in tree[open + 1..close].chars() {
        depth += i32::from(c == '{') - i32::from(c == '}');
        if c == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
        .iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |e| format!("{head}{e}")))
        .collect()
}

/// A source file's code before its tests, without comments.
fn code_of(src: &str) -> String {
    src.split("#[cfg(test)]")
        .next()
        .unwrap_or_default()
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `use` statement's tree, braces expanded, each with whether the
/// statement re-exports (`pub use`, `pub(crate) use`, ...).
fn use_trees(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    for stmt in code.split(';') {
        // The statement's start: the last line of it that begins a `use`.
        let lines: Vec<&str> = stmt.lines().collect();
        let Some(k) = lines.iter().rposition(|l| use_prefix(l.trim()).is_some()) else {
            continue;
        };
        let first = lines[k].trim();
        let tree = std::iter::once(&first[use_prefix(first).unwrap_or(0)..])
            .chain(lines[k + 1..].iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        let public = first.starts_with("pub");
        out.extend(expand(&tree).into_iter().map(|p| (public, p)));
    }
    out
}

/// The paths a source file names, tests left out: in `use` trees (an
/// alias dropped), and in code (`crate::a::b`, `super::c`).
fn paths_in(src: &str) -> Vec<String> {
    let code = code_of(src);
    let mut out: Vec<String> = use_trees(&code)
        .into_iter()
        .map(|(_, p)| p.split(" as ").next().unwrap_or_default().trim().to_owned())
        .collect();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut at = 0;
        while let Some(i) = code[at..].find(start) {
            let i = at + i;
            at = i + start.len();
            if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
                continue;
            }
            let end = code[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| i + e);
            out.push(code[i..end].trim_end_matches(':').to_owned());
        }
    }
    out
}

/// The length of the `use` keyword and its visibility starting `line`.
fn use_prefix(line: &str) -> Option<usize> {
    ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
        .iter()
        .find(|p| line.starts_with(**p))
        .map(|p| p.len())
}

/// A path a module names, made absolute (`crate::`, `super::`, `self::`, or
/// a child module by its bare name); `None` for another crate's.
fn absolute(modules: &Modules, m: &Module, path: &str) -> Option<Module> {
    let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    let mut base: Module = match parts.first().copied()? {
        "crate" => {
            parts.remove(0);
            Vec::new()
        }
        "super" | "self" => {
            // `self` is the module itself, whether a file or a directory's
            // `mod.rs`; each `super` its parent.
            let mut b = m.clone();
            while let Some(p @ ("super" | "self")) = parts.first().copied() {
                if p == "super" {
                    b.pop();
                }
                parts.remove(0);
            }
            b
        }
        child if modules.contains_key(&[m.clone(), vec![child.to_owned()]].concat()) => m.clone(),
        _ => return None,
    };
    base.extend(parts.iter().map(|p| (*p).to_owned()));
    Some(base)
}

type Modules = std::collections::BTreeMap<Module, (std::path::PathBuf, bool)>;

/// What each module re-exports (`pub use`, `pub(crate) use`): by (module,
/// name), the absolute path it stands for.
fn reexports(modules: &Modules) -> std::collections::BTreeMap<(Module, String), Module> {
    let mut out = std::collections::BTreeMap::new();
    for (m, (file, _)) in modules {
        let src = std::fs::read_to_string(file).unwrap();
        for (public, item) in use_trees(&code_of(&src)) {
            let (path, alias) = match item.split_once(" as ") {
                Some((p, a)) => (p.trim().to_owned(), Some(a.trim().to_owned())),
                None => (item.trim().to_owned(), None),
            };
            if !public || path.ends_with('*') {
                continue;
            }
            let Some(abs) = absolute(modules, m, &path) else {
                continue;
            };
            let name = alias.or_else(|| abs.last().cloned()).unwrap_or_default();
            out.insert((m.clone(), name), abs);
        }
    }
    out
}

/// The module an absolute path names: its deepest module prefix, through
/// re-exports (`catalog::Identity` is `store::identity`'s).
fn module_of(
    modules: &Modules,
    reexported: &std::collections::BTreeMap<(Module, String), Module>,
    mut abs: Module,
) -> Option<Module> {
    for _ in 0..8 {
        let t = (0..=abs.len())
            .rev()
            .map(|k| abs[..k].to_vec())
            .find(|t| modules.contains_key(t))?;
        let Some(to) = abs
            .get(t.len())
            .and_then(|n| reexported.get(&(t.clone(), n.clone())))
        else {
            return Some(t);
        };
        abs = [to.clone(), abs[t.len() + 1..].to_vec()].concat();
    }
    None
}

/// (importer, imported) for every import between two modules of which
/// neither is the other's ancestor.
fn imports(modules: &Modules) -> BTreeSet<(Module, Module)> {
    let reexported = reexports(modules);
    let mut edges = BTreeSet::new();
    for (m, (file, _)) in modules {
        let src = std::fs::read_to_string(file).unwrap();
        for path in paths_in(&src) {
            let Some(t) =
                absolute(modules, m, &path).and_then(|abs| module_of(modules, &reexported, abs))
            else {
                continue;
            };
            let related = t.starts_with(m) || m.starts_with(&t);
            if !related {
                edges.insert((m.clone(), t));
            }
        }
    }
    edges
}

//! The deployment files checked against the binary they deploy: the
//! Dockerfile, the compose file, the Kubernetes manifests and the systemd
//! unit. No container engine runs here, so the files are parsed and every
//! port, probe path, configuration key, flag and user they name is checked
//! against `ztserve` itself.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{curl, repo, sample_root, Server};
use yaml_rust2::{Yaml, YamlLoader};

const PORT: u16 = 7070;

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(rel: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn s(y: &Yaml) -> String {
    match y {
        Yaml::String(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        other => panic!("expected a scalar, got {other:?}"),
    }
}

fn list(y: &Yaml) -> Vec<String> {
    y.as_vec()
        .unwrap_or_else(|| panic!("expected a list, got {y:?}"))
        .iter()
        .map(s)
        .collect()
}

/// The port of an `IP:PORT` listen address.
fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// The binary's own default listen port, from `--print-default-config`.
fn default_port() -> u16 {
    let out = Command::new(env!("CARGO_BIN_EXE_ztserve"))
        .arg("--print-default-config")
        .output()
        .unwrap();
    let cfg: toml::Table = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    port_of(cfg["listen"].as_str().unwrap())
}

/// Paths the deployment files name inside the container or host, mapped
/// to real files here.
struct Sandbox {
    dir: tempfile::TempDir,
    map: Vec<(String, PathBuf)>,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        std::fs::create_dir(&models).unwrap();
        let secret = dir.path().join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("tokens"), "a-test-token\n").unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(secret.join("tls.crt"), cert.cert.pem()).unwrap();
        std::fs::write(secret.join("tls.key"), cert.signing_key.serialize_pem()).unwrap();
        let state = dir.path().join("state");
        let map = vec![
            ("/etc/ztserve/secret".to_owned(), secret),
            (
                "/etc/ztserve/ztserve.toml".to_owned(),
                repo().join("config/ztserve.toml"),
            ),
            ("/var/lib/ztserve".to_owned(), state),
            ("/srv/models".to_owned(), models.clone()),
            ("/models".to_owned(), models),
        ];
        Sandbox { dir, map }
    }

    fn path(&self, p: &str) -> String {
        for (from, to) in &self.map {
            if let Some(rest) = p.strip_prefix(from.as_str()) {
                return format!("{}{rest}", to.display());
            }
        }
        p.to_owned()
    }

    /// Writes `text` (a TOML file the deployment ships) with its container
    /// paths mapped, and returns where.
    fn config(&self, name: &str, text: &str) -> PathBuf {
        let mut t = text.to_owned();
        for (from, to) in &self.map {
            t = t.replace(&format!("\"{from}"), &format!("\"{}", to.display()));
        }
        let p = self.dir.path().join(name);
        std::fs::write(&p, t).unwrap();
        p
    }

    /// Runs `ztserve ARGS` as a configuration check: `--config FILE`
    /// becomes `--check-config FILE` (or `config` when given), paths are
    /// mapped, and `env` is set. Panics with the binary's message unless it
    /// accepts everything.
    fn check(&self, args: &[String], env: &BTreeMap<String, String>, config: Option<&Path>) {
        let mut out = Vec::new();
        let mut file = config.map(Path::to_path_buf);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--config" {
                let f = it.next().expect("--config takes a file");
                file.get_or_insert_with(|| PathBuf::from(self.path(f)));
            } else {
                out.push(self.path(a));
            }
        }
        let file = file.unwrap_or_else(|| self.config("empty.toml", ""));
        let r: Output = Command::new(env!("CARGO_BIN_EXE_ztserve"))
            .args(&out)
            .arg("--check-config")
            .arg(&file)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.clone(), self.path(v))))
            .output()
            .unwrap();
        assert!(
            r.status.success(),
            "ztserve {out:?} (env {env:?}) was refused: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
}

/// Dockerfile instructions of the final stage, continuation lines joined.
fn dockerfile() -> (Vec<String>, Vec<(String, String)>) {
    let text = read("Dockerfile").replace("\\\n", " ");
    let mut stages = Vec::new();
    let mut last = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (ins, rest) = line.split_once(' ').unwrap_or((line, ""));
        let ins = ins.to_uppercase();
        if ins == "FROM" {
            stages.push(rest.to_owned());
            last.clear();
        }
        last.push((ins, rest.trim().to_owned()));
    }
    (stages, last)
}

fn json_array(s: &str) -> Vec<String> {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{s}: not an exec-form array: {e}"))
}

#[test]
fn dockerfile_matches_the_binary() {
    let (stages, last) = dockerfile();
    assert!(stages.len() >= 2, "a multi-stage build: {stages:?}");
    let all = read("Dockerfile");
    assert!(
        all.contains("cargo build --release --locked"),
        "release build with --locked"
    );
    let get = |ins: &str| -> Vec<&String> {
        last.iter()
            .filter(|(i, _)| i == ins)
            .map(|(_, r)| r)
            .collect()
    };

    // Non-root: a numeric user that is not 0.
    let user = get("USER");
    let user = user.last().expect("the runtime stage sets USER");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric USER");
    assert_ne!(uid, 0, "USER must not be root");

    // Ports: EXPOSE, the listen address in ENV and the binary's default agree.
    let exposed: Vec<String> = get("EXPOSE")
        .iter()
        .flat_map(|r| r.split_whitespace().map(str::to_owned))
        .collect();
    for want in [format!("{PORT}/tcp"), format!("{PORT}/udp")] {
        assert!(exposed.contains(&want), "EXPOSE {want}: {exposed:?}");
    }
    assert_eq!(default_port(), PORT);
    let mut env = BTreeMap::new();
    for r in get("ENV") {
        for kv in r.split_whitespace() {
            let (k, v) = kv.split_once('=').expect("ENV KEY=VALUE");
            env.insert(k.to_owned(), v.to_owned());
        }
    }
    assert_eq!(port_of(&env["ZTSERVE_LISTEN"]), PORT);

    // VOLUME /models; the state directory is a volume too (read-only rootfs).
    let volumes = json_array(get("VOLUME").last().unwrap());
    assert!(volumes.contains(&"/models".to_owned()), "{volumes:?}");
    assert!(volumes.contains(&env["ZTSERVE_STATE_DIR"]), "{volumes:?}");

    // HEALTHCHECK runs the binary's own subcommand.
    let hc = get("HEALTHCHECK");
    let hc = hc.last().expect("HEALTHCHECK");
    let cmd = json_array(hc.split_once("CMD").unwrap().1.trim());
    assert_eq!(cmd, ["ztserve", "healthcheck"]);

    // The entrypoint and environment are accepted by the binary.
    let entry = json_array(get("ENTRYPOINT").last().unwrap());
    assert_eq!(entry[..3], ["ztserve", "--root", "/models"]);
    let sb = Sandbox::new();
    sb.check(&entry[1..], &env, None);

    // .dockerignore keeps build output and test data out of the context.
    let ignore = read(".dockerignore");
    for want in ["target/", ".git/", "tests/reject/", ".venv/"] {
        assert!(ignore.lines().any(|l| l.trim() == want), "{want}");
    }
}

#[test]
fn compose_file_matches_the_binary() {
    let docs = yaml("deploy/docker-compose.yml");
    let svc = &docs[0]["services"]["ztserve"];
    let user = s(&svc["user"]);
    assert_ne!(user.split(':').next().unwrap(), "0");
    assert_eq!(svc["read_only"].as_bool(), Some(true));
    let ports = list(&svc["ports"]);
    for want in [format!("{PORT}:{PORT}/tcp"), format!("{PORT}:{PORT}/udp")] {
        assert!(ports.contains(&want), "{want}: {ports:?}");
    }
    let volumes = list(&svc["volumes"]);
    assert!(
        volumes.iter().any(|v| v.ends_with(":/models:ro")),
        "models mounted read-only: {volumes:?}"
    );
    let env: BTreeMap<String, String> = svc["environment"]
        .as_hash()
        .unwrap()
        .iter()
        .map(|(k, v)| (s(k), s(v)))
        .collect();
    assert_eq!(port_of(&env["ZTSERVE_LISTEN"]), PORT);
    assert_eq!(
        list(&svc["healthcheck"]["test"]),
        ["CMD", "ztserve", "healthcheck"]
    );
    // The image's entrypoint plus the compose command.
    let mut args = vec!["--root".to_owned(), "/models".to_owned()];
    args.extend(list(&svc["command"]));
    Sandbox::new().check(&args, &env, None);
}

fn kubernetes() -> BTreeMap<String, Yaml> {
    let mut by_kind = BTreeMap::new();
    for f in [
        "deploy/k8s/deployment.yaml",
        "deploy/k8s/service.yaml",
        "deploy/k8s/configmap.yaml",
        "deploy/k8s/secret.yaml",
    ] {
        for d in yaml(f) {
            by_kind.insert(s(&d["kind"]), d);
        }
    }
    by_kind
}

#[test]
fn kubernetes_manifests_match_the_binary() {
    let k = kubernetes();
    let pod = &k["Deployment"]["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_ne!(pod["securityContext"]["runAsUser"].as_i64(), Some(0));
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert!(!c["resources"]["requests"].is_badvalue());
    assert!(!c["resources"]["limits"].is_badvalue());

    // Container ports: TCP and UDP on the same number, named for the Service.
    let ports: Vec<(String, i64, String)> = c["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|p| {
            (
                s(&p["name"]),
                p["containerPort"].as_i64().unwrap(),
                s(&p["protocol"]),
            )
        })
        .collect();
    assert!(ports.contains(&("http".into(), PORT.into(), "TCP".into())));
    assert!(ports.contains(&("quic".into(), PORT.into(), "UDP".into())));
    let svc_ports: Vec<(i64, String, String)> = k["Service"]["spec"]["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_i64().unwrap(),
                s(&p["protocol"]),
                s(&p["targetPort"]),
            )
        })
        .collect();
    assert!(svc_ports.contains(&(PORT.into(), "TCP".into(), "http".into())));
    assert!(svc_ports.contains(&(PORT.into(), "UDP".into(), "quic".into())));

    // Volumes: models read-only, state on an emptyDir at --state-dir.
    let mounts = c["volumeMounts"].as_vec().unwrap();
    let mount = |name: &str| mounts.iter().find(|m| s(&m["name"]) == name).unwrap();
    assert_eq!(s(&mount("models")["mountPath"]), "/models");
    assert_eq!(mount("models")["readOnly"].as_bool(), Some(true));
    let volumes = pod["volumes"].as_vec().unwrap();
    let state = volumes.iter().find(|v| s(&v["name"]) == "state").unwrap();
    assert!(!state["emptyDir"].is_badvalue(), "state is an emptyDir");
    let args = list(&c["args"]);
    let at = args.iter().position(|a| a == "--state-dir").unwrap();
    assert_eq!(args[at + 1], s(&mount("state")["mountPath"]));

    // The ConfigMap's TOML, with the Secret's files, passes --check-config
    // together with the container's arguments and environment.
    let sb = Sandbox::new();
    let toml_text = s(&k["ConfigMap"]["data"]["ztserve.toml"]);
    let cfg = sb.config("configmap.toml", &toml_text);
    let parsed: toml::Table = toml::from_str(&toml_text).unwrap();
    assert_eq!(port_of(parsed["listen"].as_str().unwrap()), PORT);
    let secret_keys: Vec<String> = k["Secret"]["stringData"]
        .as_hash()
        .unwrap()
        .keys()
        .map(s)
        .collect();
    for f in ["tokens", "tls.crt", "tls.key"] {
        assert!(secret_keys.contains(&f.to_owned()), "Secret holds {f}");
    }
    let env: BTreeMap<String, String> = c["env"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|e| (s(&e["name"]), s(&e["value"])))
        .collect();
    let mut full = vec!["--root".to_owned(), "/models".to_owned()];
    full.extend(args);
    sb.check(&full, &env, Some(&cfg));

    // The probe paths answer 200 on the real daemon.
    let root = sample_root();
    let server = Server::start(root.path(), &[]);
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let path = s(&c[probe]["httpGet"]["path"]);
        assert_eq!(s(&c[probe]["httpGet"]["port"]), "http");
        let r = curl(&[], &server.url(&path));
        assert_eq!(r.status, 200, "{probe} {path}");
    }
    assert_eq!(s(&c["readinessProbe"]["httpGet"]["path"]), "/readyz");
    assert_eq!(s(&c["livenessProbe"]["httpGet"]["path"]), "/healthz");
}

/// `[Section] key=value` pairs of a systemd unit, repeated keys kept.
fn unit(rel: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in read(rel).lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(sec) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = sec.to_owned();
        } else if let Some((k, v)) = line.split_once('=') {
            out.push((section.clone(), k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    out
}

#[test]
fn systemd_unit_matches_the_binary() {
    let u = unit("deploy/systemd/ztserve.service");
    let get = |k: &str| -> Vec<String> {
        u.iter()
            .filter(|(sec, key, _)| sec == "Service" && key == k)
            .map(|(_, _, v)| v.clone())
            .collect()
    };
    let one = |k: &str| get(k).pop().unwrap_or_else(|| panic!("{k} is set"));
    assert_eq!(one("DynamicUser"), "yes");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("ProtectSystem"), "strict");
    let state = format!("/var/lib/{}", one("StateDirectory"));
    let exec: Vec<String> = one("ExecStart")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert!(exec[0].ends_with("/ztserve"));
    let flag = |f: &str| {
        let at = exec.iter().position(|a| a == f).unwrap();
        exec[at + 1].clone()
    };
    assert_eq!(
        flag("--state-dir"),
        state,
        "--state-dir is the StateDirectory"
    );
    let ro = one("ReadOnlyPaths");
    assert!(
        ro.split_whitespace().any(|p| p == flag("--root")),
        "the models are read-only: {ro}"
    );
    assert_eq!(port_of(&flag("--listen")), PORT);
    let env: BTreeMap<String, String> = get("Environment")
        .iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    Sandbox::new().check(&exec[1..], &env, None);
}

#[test]
fn every_key_of_the_shipped_config_is_accepted_even_the_optional_ones() {
    // Uncomment `# key = value` lines, so keys shown without a default are
    // checked too.
    let sb = Sandbox::new();
    let text: String = read("config/ztserve.toml")
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest)
                if rest.split_once(" = ").is_some_and(|(k, _)| {
                    k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                }) =>
            {
                rest.to_owned()
            }
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains("\ntoken_file = "),
        "the optional keys were uncommented"
    );
    let text = text
        .replace("/etc/ztserve/tokens", "/etc/ztserve/secret/tokens")
        .replace("/etc/ztserve/tls.", "/etc/ztserve/secret/tls.");
    let cfg = sb.config("all-keys.toml", &text);
    sb.check(&[], &BTreeMap::new(), Some(&cfg));
}

//! The AWS shared credentials and config files (`~/.aws/credentials`,
//! `~/.aws/config`), which the `object_store` crate does not read: a
//! profile's keys and region become the same settings the `AWS_*`
//! variables give, for whichever of them the environment does not set.
//!
//! The profile is `AWS_PROFILE` (default `default`); the files are
//! `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE`, else under
//! `$HOME/.aws/`. In the config file a profile's section is
//! `[profile NAME]` (`[default]` for the default one); in the credentials
//! file it is `[NAME]`. A missing file is no error.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The settings (lower-case `aws_*` keys) a profile gives, for the keys
/// `env` (upper-case `AWS_*` variables) lacks.
pub(crate) fn settings(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let profile = env.get("AWS_PROFILE").map_or("default", String::as_str);
    let home = env.get("HOME").map(PathBuf::from);
    let file = |var: &str, name: &str| {
        env.get(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
    };
    let mut out = Vec::new();
    let mut take = |section: &BTreeMap<String, String>, keys: &[&str]| {
        for key in keys {
            let var = key.to_ascii_uppercase();
            if env.contains_key(&var) || out.iter().any(|(k, _)| k == key) {
                continue;
            }
            if let Some(v) = section.get(*key) {
                out.push(((*key).to_owned(), v.clone()));
            }
        }
    };
    // Keys from the environment are taken as a set, never mixed with a file's.
    let keyed = env.contains_key("AWS_ACCESS_KEY_ID");
    if let (false, Some(text)) = (
        keyed,
        file("AWS_SHARED_CREDENTIALS_FILE", "credentials")
            .and_then(|p| std::fs::read_to_string(p).ok()),
    ) {
        let keys = [
            "aws_access_key_id",
            "aws_secret_access_key",
            "aws_session_token",
        ];
        take(&section(&text, profile), &keys);
    }
    if let Some(text) =
        file("AWS_CONFIG_FILE", "config").and_then(|p| std::fs::read_to_string(p).ok())
    {
        let name = if profile == "default" {
            "default".to_owned()
        } else {
            format!("profile {profile}")
        };
        let s = section(&text, &name);
        let region: BTreeMap<String, String> = s
            .get("region")
            .map(|r| ("aws_region".to_owned(), r.clone()))
            .into_iter()
            .collect();
        take(&region, &["aws_region"]);
        if !keyed {
            take(&s, &["aws_access_key_id", "aws_secret_access_key"]);
        }
    }
    out
}

/// The `key = value` lines of section `[name]` of an INI text, keys in
/// lower case.
fn section(text: &str, name: &str) -> BTreeMap<String, String> {
    let mut inside = false;
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = header.trim() == name;
            continue;
        }
        if let (true, Some((k, v))) = (inside, line.split_once('=')) {
            out.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_fills_in_what_the_environment_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("credentials");
        std::fs::write(
            &creds,
            "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n\n# a comment\n[work]\nAWS_ACCESS_KEY_ID=WORK\naws_secret_access_key = worksecret\naws_session_token = tok\n",
        )
        .unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[default]\nregion = us-east-1\n[profile work]\nregion = eu-west-3\n",
        )
        .unwrap();
        let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            let mut m: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            m.insert(
                "AWS_SHARED_CREDENTIALS_FILE".into(),
                creds.display().to_string(),
            );
            m.insert("AWS_CONFIG_FILE".into(), config.display().to_string());
            m
        };
        let got = settings(&env(&[]));
        assert!(got.contains(&("aws_access_key_id".into(), "DEF".into())));
        assert!(got.contains(&("aws_region".into(), "us-east-1".into())));
        let got = settings(&env(&[("AWS_PROFILE", "work"), ("AWS_REGION", "x")]));
        assert!(got.contains(&("aws_access_key_id".into(), "WORK".into())));
        assert!(got.contains(&("aws_session_token".into(), "tok".into())));
        // The environment wins.
        assert!(!got.iter().any(|(k, _)| k == "aws_region"));
        let got = settings(&env(&[("AWS_ACCESS_KEY_ID", "ENV")]));
        assert!(!got.iter().any(|(k, _)| k == "aws_access_key_id"));
        // No files: nothing.
        let none: BTreeMap<String, String> =
            [("HOME".to_owned(), "/nonexistent".to_owned())].into();
        assert!(settings(&none).is_empty());
    }
}

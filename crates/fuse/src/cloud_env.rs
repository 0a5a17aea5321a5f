//! The configuration of an object store's client as a mount reads it:
//! the `AWS_*`, `GOOGLE_*` and `AZURE_*` environment variables (the keys
//! object_store's builders read, [`crate::objects::store_for_url`]), and
//! for S3 what the environment leaves out taken from the AWS command
//! line's files, as the AWS tools read them: the profile `AWS_PROFILE`
//! names (`default` without it), its keys from the credentials file
//! (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`) and its
//! region and endpoint from the config file (`AWS_CONFIG_FILE`, else
//! `~/.aws/config`, where a profile's section is `[profile NAME]`).
//! Instance roles and web identities are object_store's own (it asks the
//! instance's metadata service when it has no keys).

use std::path::PathBuf;

/// The client's options for a mount: the environment's, then the AWS
/// files' for the keys the environment does not give.
pub(crate) fn store_options() -> Vec<(String, String)> {
    let mut opts: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            ["AWS_", "GOOGLE_", "AZURE_"]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let file = |var: &str, name: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    let credentials = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let config = file("AWS_CONFIG_FILE", "config");
    for (k, v) in profile_options(&credentials, &config, &profile) {
        if !opts.iter().any(|(have, _)| *have == k) {
            opts.push((k, v));
        }
    }
    opts
}

/// The options profile `profile` gives in the AWS files' texts: keys and
/// session token from `credentials` (section `[NAME]`), region and
/// endpoint from `config` (`[default]` or `[profile NAME]`).
fn profile_options(credentials: &str, config: &str, profile: &str) -> Vec<(String, String)> {
    let in_config = if profile == "default" {
        "default".to_owned()
    } else {
        format!("profile {profile}")
    };
    let wanted = [
        (
            credentials,
            profile,
            "aws_access_key_id",
            "aws_access_key_id",
        ),
        (
            credentials,
            profile,
            "aws_secret_access_key",
            "aws_secret_access_key",
        ),
        (
            credentials,
            profile,
            "aws_session_token",
            "aws_session_token",
        ),
        (config, in_config.as_str(), "region", "aws_region"),
        (config, in_config.as_str(), "endpoint_url", "aws_endpoint"),
    ];
    wanted
        .iter()
        .filter_map(|(text, section, key, option)| {
            ini_value(text, section, key).map(|v| ((*option).to_owned(), v))
        })
        .collect()
}

/// The value of `key` in section `[section]` of an INI text (`key =
/// value` lines; `#` and `;` start comments), the last one given.
fn ini_value(text: &str, section: &str, key: &str) -> Option<String> {
    let mut inside = false;
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) if inside && k.trim() == key => found = Some(v.trim().to_owned()),
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_is_read_from_the_aws_files() {
        let credentials = "[default]\naws_access_key_id = AK1\naws_secret_access_key=SK1\n\
                           [work]\n# a comment\naws_access_key_id = AK2\n\
                           aws_secret_access_key = SK2\naws_session_token = T2\n";
        let config = "[default]\nregion = eu-west-1\n[profile work]\nregion = us-east-2\n\
                      endpoint_url = http://127.0.0.1:9000\n";
        let get = |profile: &str| {
            let mut o = profile_options(credentials, config, profile);
            o.sort();
            o
        };
        let pairs = |v: &[(&str, &str)]| {
            let mut o: Vec<(String, String)> = v
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            o.sort();
            o
        };
        assert_eq!(
            get("default"),
            pairs(&[
                ("aws_access_key_id", "AK1"),
                ("aws_secret_access_key", "SK1"),
                ("aws_region", "eu-west-1"),
            ])
        );
        assert_eq!(
            get("work"),
            pairs(&[
                ("aws_access_key_id", "AK2"),
                ("aws_secret_access_key", "SK2"),
                ("aws_session_token", "T2"),
                ("aws_region", "us-east-2"),
                ("aws_endpoint", "http://127.0.0.1:9000"),
            ])
        );
        assert!(get("missing").is_empty());
    }
}

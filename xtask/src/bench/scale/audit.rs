//! The API requests each operator made, from the API server's own audit
//! log: a policy that records (at Metadata level) only the requests of the
//! operators' ServiceAccounts, one ServiceAccount per operator, so requests
//! are told apart by user even while all of them run. Read phase by phase:
//! [`AuditLog::take`] returns what was written since the last call (the log
//! backend writes each event before the response goes out, so a request
//! that has finished is in the file).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// The audit policy: Metadata for the requests of `group` (the operators'
/// ServiceAccounts), nothing for anyone else. A watch is recorded when it
/// starts (ResponseStarted), every other request when it completes.
pub fn policy(group: &str) -> String {
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n    userGroups: [\"{group}\"]\n  - level: None\n"
    )
}

/// The API server flags that write the log.
pub fn apiserver_flags(policy_file: &Path, log: &Path) -> Vec<String> {
    vec![
        format!("--audit-policy-file={}", policy_file.display()),
        format!("--audit-log-path={}", log.display()),
        "--audit-log-format=json".into(),
        // No rotation during a run (the default would rotate at 100 MB).
        "--audit-log-maxsize=100000".into(),
        "--audit-log-maxbackup=0".into(),
        "--audit-log-mode=blocking".into(),
    ]
}

/// One request, as far as the tables go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub user: String,
    /// `list`, `watch`, `get`, `patch`, … (the audit log's verb).
    pub verb: String,
    /// `pods`, `pods/ephemeralcontainers`, `leases`, …
    pub resource: String,
    /// A list with `resourceVersion=0` (or `resourceVersionMatch=NotOlderThan`):
    /// any version will do, so the API server answers from its watch cache.
    /// (kube's `any_semantic()` sends it only without a page size: with a
    /// limit it asks for a consistent, paginated list.)
    pub from_cache: bool,
    /// A list with `limit=` (paginated).
    pub paged: bool,
    /// A watch that begins with a list (`sendInitialEvents=true`, a
    /// streamed list): counted as a list.
    pub streamed: bool,
    /// When the API server received it.
    pub at: Option<Timestamp>,
}

impl Request {
    fn parse(line: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(line).ok()?;
        let stage = v["stage"].as_str()?;
        let verb = v["verb"].as_str()?.to_string();
        // A watch once, when it starts; anything else once, when it completes.
        let counted = if verb == "watch" { stage == "ResponseStarted" } else { stage == "ResponseComplete" };
        if !counted {
            return None;
        }
        let object = &v["objectRef"];
        let mut resource = object["resource"].as_str().unwrap_or("(non-resource)").to_string();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let uri = v["requestURI"].as_str().unwrap_or_default();
        let query = uri.split_once('?').map(|(_, q)| q).unwrap_or_default();
        let param = |name: &str| query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='));
        let from_cache = param("resourceVersion") == Some("0") || param("resourceVersionMatch") == Some("NotOlderThan");
        Some(Self {
            user: v["user"]["username"].as_str().unwrap_or_default().to_string(),
            verb,
            resource,
            from_cache,
            paged: param("limit").is_some_and(|l| l != "0"),
            streamed: param("sendInitialEvents") == Some("true"),
            at: v["requestReceivedTimestamp"].as_str().and_then(|t| t.parse().ok()),
        })
    }
}

/// The log, read from where the last [`AuditLog::take`] stopped.
pub struct AuditLog {
    path: PathBuf,
    offset: u64,
}

impl AuditLog {
    pub fn new(path: PathBuf) -> Self {
        Self { path, offset: 0 }
    }

    /// The requests recorded since the last call (whole lines only).
    pub fn take(&mut self) -> anyhow::Result<Vec<Request>> {
        let Ok(mut file) = std::fs::File::open(&self.path) else { return Ok(Vec::new()) };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        self.offset += whole as u64;
        Ok(text[..whole].lines().filter_map(Request::parse).collect())
    }
}

/// Requests of one user in one phase, counted by verb and resource.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub by_verb_resource: BTreeMap<(String, String), u64>,
    /// Lists (and watches that stream a list first), and how many of them
    /// were served from the watch cache and were paginated.
    pub lists: u64,
    pub lists_from_cache: u64,
    pub lists_paged: u64,
    /// When the last list was received.
    pub last_list: Option<Timestamp>,
}

impl Counts {
    pub fn of(requests: &[Request], user: &str) -> Self {
        let mut c = Counts::default();
        for r in requests.iter().filter(|r| r.user == user) {
            *c.by_verb_resource.entry((r.verb.clone(), r.resource.clone())).or_default() += 1;
            if r.verb == "list" || r.streamed {
                c.lists += 1;
                c.lists_from_cache += u64::from(r.from_cache);
                c.lists_paged += u64::from(r.paged);
                c.last_list = c.last_list.max(r.at);
            }
        }
        c
    }

    pub fn total(&self) -> u64 {
        self.by_verb_resource.values().sum()
    }

    /// `VERB resource N, …`, biggest first.
    pub fn summary(&self) -> String {
        let mut items: Vec<(&(String, String), &u64)> = self.by_verb_resource.iter().collect();
        items.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        if items.is_empty() {
            return "none".into();
        }
        items.iter().map(|((verb, res), n)| format!("{} {res} {n}", verb.to_uppercase())).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn line(stage: &str, verb: &str, uri: &str, resource: &str, sub: Option<&str>) -> String {
        let mut obj = serde_json::json!({"resource": resource, "namespace": "a"});
        if let Some(s) = sub {
            obj["subresource"] = s.into();
        }
        serde_json::json!({"stage": stage, "verb": verb, "requestURI": uri, "objectRef": obj,
            "user": {"username": "system:serviceaccount:flotilla-system:op"}})
        .to_string()
    }

    #[test]
    fn lists_watches_and_writes_are_counted_once_each() {
        let lines = [
            line("ResponseComplete", "list", "/api/v1/pods?limit=50&resourceVersion=0", "pods", None),
            line("ResponseStarted", "watch", "/api/v1/pods?watch=true&resourceVersion=12", "pods", None),
            line("ResponseComplete", "watch", "/api/v1/pods?watch=true&resourceVersion=12", "pods", None),
            line("ResponseComplete", "list", "/api/v1/services", "services", None),
            line(
                "ResponseComplete",
                "patch",
                "/api/v1/namespaces/a/pods/p/ephemeralcontainers",
                "pods",
                Some("ephemeralcontainers"),
            ),
        ];
        let requests: Vec<Request> = lines.iter().filter_map(|l| Request::parse(l)).collect();
        let c = Counts::of(&requests, "system:serviceaccount:flotilla-system:op");
        assert_eq!(c.total(), 4);
        assert_eq!((c.lists, c.lists_from_cache, c.lists_paged), (2, 1, 1));
        assert_eq!(c.by_verb_resource[&("patch".to_string(), "pods/ephemeralcontainers".to_string())], 1);
        assert_eq!(Counts::of(&requests, "someone-else").total(), 0);
    }
}

//! Where a sink may send (the admin's decision): the address policy of
//! [`crate::address`], also after DNS at connect time, and for Slack only
//! the `--slack-hosts`; the sinks' HTTP client that enforces it.

use std::sync::Arc;
use std::time::Duration;

use crate::address::{Policy, REFUSED};

/// Where sinks may send: the address policy, and the hosts a Slack sink
/// may post to (`--slack-hosts`).
#[derive(Debug, Clone)]
pub struct SinkRules {
    pub addresses: Arc<Policy>,
    pub slack_hosts: Arc<Vec<String>>,
}

impl Default for SinkRules {
    fn default() -> Self {
        Self { addresses: Arc::default(), slack_hosts: Arc::new(vec![DEFAULT_SLACK_HOST.to_string()]) }
    }
}

/// `--slack-hosts`' default.
pub const DEFAULT_SLACK_HOST: &str = "hooks.slack.com";

/// The sinks' HTTP client: `timeout` per attempt, no redirects (a sink
/// cannot send us elsewhere: a 3xx answer is refused by policy), and host
/// names resolved to the addresses `policy` admits only.
pub fn http_client(timeout: Duration, policy: Arc<Policy>) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(crate::address::SafeResolver { policy }))
        .user_agent(concat!("flotilla-pod-alert/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Checks a sink URL: http or https with a host; an address the policy
/// admits (a host name is checked again at connect time, by the resolver);
/// for Slack, one of the `--slack-hosts`. The messages do not repeat the URL:
/// it may come from a Secret.
pub fn check_url(raw: &str, slack: bool, rules: &SinkRules) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(raw.trim()).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("the scheme is not http or https".into());
    }
    let literal = match url.host() {
        None => return Err("the URL has no host".into()),
        Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
        Some(url::Host::Domain(_)) => None,
    };
    if slack {
        let host = url.host_str().unwrap_or_default().trim_end_matches('.');
        if !rules.slack_hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return Err(format!("{REFUSED}: a Slack sink posts only to the operator's --slack-hosts"));
        }
    }
    if literal.is_some_and(|ip| !rules.addresses.admits(ip)) {
        return Err(format!(
            "{REFUSED}: the address is in a range the operator never sends to (loopback, private, link-local, …) unless its --allowed-sink-cidrs admit it"
        ));
    }
    Ok(url)
}

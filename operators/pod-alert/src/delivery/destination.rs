//! Where a sink may send (the admin's decision): the address policy of
//! [`crate::address`], also after DNS at connect time, for Slack only the
//! `--slack-hosts` (a webhook) or the `--slack-api-url` alone (a bot
//! token), for Teams only the `--teams-hosts`, and for PagerDuty the
//! `--pagerduty-url` alone; the sinks' HTTP client that enforces it.

use std::sync::Arc;
use std::time::Duration;

use crate::address::{Policy, REFUSED};

/// Where sinks may send: the address policy, the hosts a Slack webhook or
/// Teams sink may post to (`--slack-hosts`, `--teams-hosts`), Slack's Web
/// API for bot tokens (`--slack-api-url`) and PagerDuty's Events API
/// (`--pagerduty-url`).
#[derive(Debug, Clone)]
pub struct SinkRules {
    pub addresses: Arc<Policy>,
    pub slack_hosts: Arc<Vec<String>>,
    /// Exact host names, or suffixes written with a leading dot.
    pub teams_hosts: Arc<Vec<String>>,
    pub pagerduty_url: Arc<str>,
    /// Slack's Web API base URL: `<url>/chat.postMessage`, `<url>/chat.update`.
    pub slack_api_url: Arc<str>,
}

impl Default for SinkRules {
    fn default() -> Self {
        Self {
            addresses: Arc::default(),
            slack_hosts: Arc::new(vec![DEFAULT_SLACK_HOST.to_string()]),
            teams_hosts: Arc::new(DEFAULT_TEAMS_HOSTS.split(',').map(str::to_string).collect()),
            pagerduty_url: DEFAULT_PAGERDUTY_URL.into(),
            slack_api_url: DEFAULT_SLACK_API_URL.into(),
        }
    }
}

/// `--slack-hosts`' default.
pub const DEFAULT_SLACK_HOST: &str = "hooks.slack.com";
/// `--teams-hosts`' default: where Microsoft's Workflows webhooks live
/// (Azure Logic Apps' regional hosts, Power Platform's environments).
pub const DEFAULT_TEAMS_HOSTS: &str = ".logic.azure.com,.api.powerplatform.com";
/// `--slack-api-url`'s default: Slack's Web API, where a Slack sink with a
/// bot token posts (`chat.postMessage`, `chat.update`).
pub const DEFAULT_SLACK_API_URL: &str = "https://slack.com/api";
/// `--pagerduty-url`'s default: PagerDuty's Events API v2 (EU accounts
/// use https://events.eu.pagerduty.com/v2/enqueue).
pub const DEFAULT_PAGERDUTY_URL: &str = "https://events.pagerduty.com/v2/enqueue";

/// Whether `host` is one of `allowed`: an exact name, or under a
/// `.suffix` (never the suffix's own name alone, and case-blind).
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    allowed.iter().any(|a| match a.strip_prefix('.') {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{}", suffix.to_ascii_lowercase())),
        None => a.eq_ignore_ascii_case(&host),
    })
}

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
/// for the `slack` sink one of the `--slack-hosts`, for `teams` one of the
/// `--teams-hosts`. The messages do not repeat the URL: it may come from a
/// Secret.
pub fn check_url(raw: &str, sink: &str, rules: &SinkRules) -> Result<reqwest::Url, String> {
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
    let host = url.host_str().unwrap_or_default();
    if sink == "slack" && !host_allowed(host, &rules.slack_hosts) {
        return Err(format!("{REFUSED}: a Slack sink posts only to the operator's --slack-hosts"));
    }
    if sink == "teams" && !host_allowed(host, &rules.teams_hosts) {
        return Err(format!("{REFUSED}: a Teams sink posts only to the operator's --teams-hosts"));
    }
    if literal.is_some_and(|ip| !rules.addresses.admits(ip)) {
        return Err(format!(
            "{REFUSED}: the address is in a range the operator never sends to (loopback, private, link-local, …) unless its --allowed-sink-cidrs admit it"
        ));
    }
    Ok(url)
}

//! Secrets taken out of log tails (issue 32). Pure.
//!
//! A crashing container's last lines are where secrets end up: a dumped
//! config, a failed request with its `Authorization` header, a connection
//! string. The tail goes to status (readable by anyone who can read the
//! PodAlert), Events and every sink, so it is redacted once, where it is read
//! ([`crate::logs::read`]), before it is held or judged: nothing downstream
//! ever sees the raw text.
//!
//! A [`Redactor`] is built once per PodAlert spec (`spec.logs.redact`,
//! `spec.logs.redactDefaults`). Each pattern — the defaults' few and the
//! user's at most 32 — is one linear-time pass (the `regex` crate: no
//! backtracking, so an untrusted pattern cannot make a pass slow); the
//! byte ranges they find are merged and each merged range becomes one
//! [`REDACTED`]. Finding ranges on the original text first, instead of
//! replacing pattern after pattern, means one pattern's replacement never
//! hides a secret from another (e.g. a key name swallowed as a prefix).

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, LazyLock};

use regex::Regex;

/// What every redaction leaves.
pub const REDACTED: &str = "[redacted]";

/// The default kinds: (name, pattern). What a match redacts is its first
/// capture group that took part, else the whole match (the key names,
/// `Bearer `, a URL's scheme and host stay: they say what was there).
const DEFAULTS: [(&str, &str); 8] = [
    // RFC 6750's token68 after "Bearer"; 8 characters at least, so that
    // prose ("the bearer of", "missing Bearer token") stays.
    ("bearer", r"(?i)\bbearer[ \t]+([A-Za-z0-9\-._~+/]{8,}=*)"),
    // The header's whole value, to the end of the line or a closing quote
    // (Basic, Digest and other schemes carry their secret anywhere in it).
    ("authorization", r#"(?i)\b(?:proxy-)?authorization["']?[ \t]*[:=][ \t]*["']?([^"'\r\n]+)"#),
    ("aws-access-key-id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    (
        "aws-secret-access-key",
        r#"(?i)aws[_-]?secret[_-]?access[_-]?key["']?[ \t]*[:=][ \t]*["']?([A-Za-z0-9/+=]{40,})"#,
    ),
    // Three base64url segments, the header's JSON starting `{"` = eyJ;
    // the signature may be empty (alg none).
    ("jwt", r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"),
    // The whole block; a tail that ends inside it loses everything from BEGIN.
    (
        "pem-private-key",
        r"(?s)-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\z)",
    ),
    // scheme://userinfo@: greedy up to the authority's last '@' (a password
    // may hold an unescaped one); '/', '?', '#' and whitespace end it.
    ("url-userinfo", r#"\b[A-Za-z][A-Za-z0-9+.-]*://([^\s/?#"'<>]+)@"#),
    // password=, "client_secret": "…", X-Api-Key:, DB_PASSWORD=… — the
    // name may be longer but ends with the word; the value is a quoted
    // string or runs to whitespace, a quote or '&' (a query string).
    (
        "key-value",
        r#"(?i)\b[\w.-]*?(?:password|passwd|secret|token|api[_-]?key)["']?[ \t]*[:=][ \t]*(?:"([^"\r\n]+)"|'([^'\r\n]+)'|([^\s"'&]+))"#,
    ),
];

/// A tail that starts inside a key block (its BEGIN line cut off by
/// tailLines or maxBytes): no BEGIN before the first END.
const PEM_BEGIN: &str = r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----";
const PEM_END: &str = r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----";

/// The defaults, compiled once per process.
struct Defaults {
    kinds: Vec<Regex>,
    pem_begin: Regex,
    pem_end: Regex,
}

static COMPILED: LazyLock<Result<Arc<Defaults>, regex::Error>> = LazyLock::new(|| {
    Ok(Arc::new(Defaults {
        kinds: DEFAULTS.iter().map(|(_, p)| Regex::new(p)).collect::<Result<_, _>>()?,
        pem_begin: Regex::new(PEM_BEGIN)?,
        pem_end: Regex::new(PEM_END)?,
    }))
});

/// The built-in patterns did not compile (a bug, caught by the unit tests).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the built-in redaction patterns do not compile: {0}")]
pub struct DefaultsBroken(String);

/// One PodAlert's redaction: the defaults (unless turned off) and its own
/// patterns, compiled.
#[derive(Debug, Clone)]
pub struct Redactor {
    defaults: Option<Arc<Defaults>>,
    custom: Vec<Regex>,
    profile: Arc<str>,
}

impl std::fmt::Debug for Defaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Defaults")
    }
}

impl Redactor {
    /// `defaults`: spec.logs.redactDefaults; `custom`: spec.logs.redact,
    /// compiled by the caller (`rules::user_regex`, the bounds every user
    /// regex of the CRD has).
    pub fn new(defaults: bool, custom: Vec<Regex>) -> Result<Self, DefaultsBroken> {
        let defaults = match defaults {
            true => Some(Arc::clone(COMPILED.as_ref().map_err(|e| DefaultsBroken(e.to_string()))?)),
            false => None,
        };
        // What tells two redactors apart, for sharing a held tail: JSON
        // of (defaults, patterns) is unambiguous whatever the patterns hold.
        let patterns: Vec<&str> = custom.iter().map(Regex::as_str).collect();
        let profile = serde_json::to_string(&(defaults.is_some(), patterns)).unwrap_or_default().into();
        Ok(Self { defaults, custom, profile })
    }

    /// The defaults only (spec.logs's defaults): what a PodAlert whose spec
    /// cannot be used gets, e.g. for a tail restored from its status.
    pub fn defaults() -> Result<Self, DefaultsBroken> {
        Self::new(true, Vec::new())
    }

    /// Equal for two redactors that redact the same way: a tail redacted by
    /// one is shared only with PodAlerts whose profile is equal.
    pub fn profile(&self) -> &Arc<str> {
        &self.profile
    }

    /// `text` with every secret replaced by [`REDACTED`]; borrowed when
    /// there is none.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut spans: Vec<Range<usize>> = Vec::new();
        if let Some(d) = &self.defaults {
            for re in &d.kinds {
                secrets(re, text, &mut spans);
            }
            // A tail that begins inside a key block: from its start to END.
            if let Some(end) = d.pem_end.find(text)
                && d.pem_begin.find(text).is_none_or(|b| b.start() > end.start())
            {
                spans.push(0..end.end());
            }
        }
        for re in &self.custom {
            secrets(re, text, &mut spans);
        }
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        spans.sort_unstable_by_key(|r| (r.start, r.end));
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        let mut open: Option<Range<usize>> = None;
        for r in spans {
            match &mut open {
                Some(o) if r.start <= o.end => o.end = o.end.max(r.end),
                _ => {
                    if let Some(o) = open.replace(r) {
                        out.push_str(&text[at..o.start]);
                        out.push_str(REDACTED);
                        at = o.end;
                    }
                }
            }
        }
        if let Some(o) = open {
            out.push_str(&text[at..o.start]);
            out.push_str(REDACTED);
            at = o.end;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }
}

/// The ranges of `re`'s matches in `text` to redact: each match's first
/// capture group that took part, else the whole match; never empty ones
/// (a pattern like `x*` matches nothing everywhere).
fn secrets(re: &Regex, text: &str, spans: &mut Vec<Range<usize>>) {
    if re.captures_len() == 1 {
        spans.extend(re.find_iter(text).map(|m| m.range()).filter(|r| !r.is_empty()));
        return;
    }
    for c in re.captures_iter(text) {
        let secret = c.iter().skip(1).flatten().next().or_else(|| c.get(0));
        if let Some(m) = secret.filter(|m| !m.is_empty()) {
            spans.push(m.range());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;

    use super::*;

    fn r(text: &str) -> String {
        Redactor::defaults().unwrap().redact(text).into_owned()
    }

    /// Every kind: (input, expected) pairs that must redact, and text that
    /// looks alike but must stay.
    fn check(redacts: &[(&str, &str)], stays: &[&str]) {
        for (input, want) in redacts {
            assert_eq!(r(input), *want, "{input:?}");
        }
        for s in stays {
            assert_eq!(r(s), *s, "ordinary text changed: {s:?}");
        }
    }

    #[test]
    fn the_defaults_compile() {
        assert!(COMPILED.is_ok(), "{:?}", COMPILED.as_ref().err());
    }

    #[test]
    fn bearer_tokens() {
        check(
            &[
                ("GET /x Bearer abcdef123456", "GET /x Bearer [redacted]"),
                ("bearer  a.b-c_d~e+f/g==  next", "bearer  [redacted]  next"),
            ],
            &["the bearer of bad news", "missing Bearer token", "token_type: bearer"],
        );
    }

    #[test]
    fn authorization_headers() {
        check(
            &[
                ("Authorization: Basic dXNlcjpwYXNz", "Authorization: [redacted]"),
                ("> authorization: Bearer xyz\n< 401", "> authorization: [redacted]\n< 401"),
                (r#"{"Authorization":"Digest a=1, b=2","x":1}"#, r#"{"Authorization":"[redacted]","x":1}"#),
                ("Proxy-Authorization= Negotiate YII\n", "Proxy-Authorization= [redacted]\n"),
            ],
            &["authorization failed for user bob", "Authorization:\nnext", "unauthorized: 401"],
        );
    }

    #[test]
    fn aws_keys() {
        check(
            &[
                ("id=AKIAIOSFODNN7EXAMPLE ok", "id=[redacted] ok"),
                ("ASIAY34FZKBOKMUTVV7A", "[redacted]"),
                (
                    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
                    "aws_secret_access_key = [redacted]\n",
                ),
                (
                    r#"AWS_SECRET_ACCESS_KEY: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY""#,
                    r#"AWS_SECRET_ACCESS_KEY: "[redacted]""#,
                ),
            ],
            &[
                "AKIA is a prefix",
                "AKIAIOSFODNN7EXAMPLEXX is too long",
                "akiaiosfodnn7example",
                "aws_secret_access_key=short",
                "set AWS_SECRET_ACCESS_KEY in the environment",
            ],
        );
    }

    #[test]
    fn jwts() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        check(
            &[
                (&format!("cookie: s={jwt}; Path=/"), "cookie: s=[redacted]; Path=/"),
                ("eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0. tail", "[redacted] tail"),
            ],
            &["eyJ alone", "eyJhbGciOiJIUzI1NiJ9.only-two", "keyJa.b.c"],
        );
    }

    #[test]
    fn pem_private_keys_whole_and_cut() {
        let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nq0x+abc/def==\n-----END RSA PRIVATE KEY-----";
        check(
            &[
                (&format!("loading\n{key}\ndone\n"), "loading\n[redacted]\ndone\n"),
                ("a\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\nBgkqhkiG9w0B", "a\n[redacted]"),
                ("MIIEvQIBADAN\nBgkqhkiG9w0B\n-----END EC PRIVATE KEY-----\npanic\n", "[redacted]\npanic\n"),
                (
                    r#"{"key":"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----\n"}"#,
                    r#"{"key":"[redacted]\n"}"#,
                ),
            ],
            &[
                "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
                "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----",
                "the private key is missing",
            ],
        );
        // A whole block after a cut one: each redacted, the text between stays.
        assert_eq!(r(&format!("AAAA\n-----END PRIVATE KEY-----\nmiddle\n{key}\n")), "[redacted]\nmiddle\n[redacted]\n");
    }

    #[test]
    fn url_userinfo() {
        check(
            &[
                ("dial postgres://app:s3cret@db:5432/x failed", "dial postgres://[redacted]@db:5432/x failed"),
                ("mongodb+srv://u:p@ss@c.example.net/?a=1", "mongodb+srv://[redacted]@c.example.net/?a=1"),
                ("https://ghp_tok123@github.com/org/repo", "https://[redacted]@github.com/org/repo"),
            ],
            &[
                "https://example.com/a@b",
                "GET http://10.0.0.1:8080/healthz",
                "mail bob@example.com",
                "git@github.com:org/repo.git",
                "https://example.com/?q=a@b",
            ],
        );
    }

    #[test]
    fn key_values() {
        check(
            &[
                ("login password=hunter2 user=bob", "login password=[redacted] user=bob"),
                ("PASSWD: 'a b c'", "PASSWD: '[redacted]'"),
                (r#"{"client_secret": "xyz", "n": 1}"#, r#"{"client_secret": "[redacted]", "n": 1}"#),
                ("GET /cb?code=1&access_token=abc123&state=z", "GET /cb?code=1&access_token=[redacted]&state=z"),
                ("DB_PASSWORD=pa55", "DB_PASSWORD=[redacted]"),
                ("X-Api-Key: k-123\n", "X-Api-Key: [redacted]\n"),
                ("apikey=1 API_KEY=2 api-key:3", "apikey=[redacted] API_KEY=[redacted] api-key:[redacted]"),
                ("Secret = \"s p a c e\"", "Secret = \"[redacted]\""),
            ],
            &[
                "password reset requested for alice",
                "the token expired",
                "5 secrets synced",
                "tokens=5 max_tokens: 100",
                "token_type=bearer",
                "key=value",
                "password:\nnext line",
            ],
        );
    }

    #[test]
    fn overlapping_matches_are_one_redaction() {
        assert_eq!(r("Authorization: Bearer eyJa.eyJb.c"), "Authorization: [redacted]");
        assert_eq!(r("token=eyJhbG.eyJzdWI.sig"), "token=[redacted]");
    }

    fn custom(defaults: bool, patterns: &[&str]) -> Redactor {
        Redactor::new(defaults, patterns.iter().map(|p| Regex::new(p).unwrap()).collect()).unwrap()
    }

    #[test]
    fn custom_patterns_and_the_switch() {
        let r = custom(true, &[r"session=([0-9a-f]+)", r"ssn \d{3}-\d{2}-\d{4}", r"x*"]);
        assert_eq!(
            r.redact("session=deadbeef ssn 123-45-6789 password=p"),
            "session=[redacted] [redacted] password=[redacted]"
        );
        assert_eq!(r.redact("nothing here"), "nothing here", "an empty match redacts nothing");
        let off = custom(false, &[r"ssn \d{3}-\d{2}-\d{4}"]);
        assert_eq!(off.redact("password=p ssn 123-45-6789"), "password=p [redacted]");
        assert_eq!(custom(false, &[]).redact("password=p"), "password=p");
    }

    #[test]
    fn profiles_tell_redactors_apart() {
        let a = custom(true, &[]);
        assert_eq!(a.profile(), Redactor::defaults().unwrap().profile());
        assert_ne!(a.profile(), custom(false, &[]).profile());
        assert_ne!(custom(true, &["a", "b"]).profile(), custom(true, &["a\",\"b"]).profile());
        assert_eq!(custom(true, &["a"]).profile(), custom(true, &["a"]).profile());
    }

    /// Ordinary log lines, some close to a secret's shape.
    fn ordinary() -> impl Strategy<Value = String> {
        let words = prop::sample::select(vec![
            "starting",
            "error: connection refused",
            "GET /healthz 200 1.2ms",
            "user=alice",
            "retry 3/5",
            "key=value",
            "http://example.com/path?q=1",
            "mail bob@example.com",
            "the token expired",
            "password reset requested",
            "the bearer of bad news",
            "AKIA prefix",
            "eyJ",
            "-----BEGIN CERTIFICATE-----",
            "panic: index out of range [3] with length 3",
            "{\"level\":\"info\",\"msg\":\"ok\"}",
        ]);
        prop::collection::vec((words, prop::sample::select(vec![" ", "\n", "  ", "\t"])), 0..30)
            .prop_map(|v| v.into_iter().flat_map(|(w, s)| [w, s]).collect())
    }

    /// A secret (its value alone) and how it appears in a log line.
    fn secret() -> impl Strategy<Value = (String, String)> {
        let v = "[A-Za-z0-9]{12,24}";
        prop_oneof![
            v.prop_map(|s| (s.clone(), format!("Authorization: Bearer {s}"))),
            v.prop_map(|s| (s.clone(), format!("Bearer {s}"))),
            "[A-Z0-9]{16}".prop_map(|s| (format!("AKIA{s}"), format!("key id AKIA{s} used"))),
            "[A-Za-z0-9/+]{40}".prop_map(|s| (s.clone(), format!("AWS_SECRET_ACCESS_KEY={s}"))),
            ("[A-Za-z0-9_-]{8,20}", "[A-Za-z0-9_-]{8,20}", "[A-Za-z0-9_-]{8,20}").prop_map(|(a, b, c)| {
                let jwt = format!("eyJ{a}.{b}.{c}");
                (jwt.clone(), format!("token {jwt}"))
            }),
            v.prop_map(|s| (s.clone(), format!("-----BEGIN PRIVATE KEY-----\n{s}\n-----END PRIVATE KEY-----"))),
            v.prop_map(|s| (s.clone(), format!("-----BEGIN EC PRIVATE KEY-----\n{s}"))),
            v.prop_map(|s| (s.clone(), format!("redis://default:{s}@cache:6379"))),
            (prop::sample::select(vec!["password", "PASSWD", "client_secret", "token", "api_key", "apikey"]), v)
                .prop_map(|(k, s)| (s.clone(), format!("{k}={s}"))),
            v.prop_map(|s| (s.clone(), format!("\"password\": \"{s}\""))),
        ]
    }

    proptest! {
        #[test]
        fn text_without_secrets_is_unchanged(text in ordinary()) {
            prop_assert_eq!(r(&text), text);
        }

        #[test]
        fn an_injected_secret_never_comes_out(
            before in ordinary(), (value, line) in secret(), after in ordinary(),
        ) {
            let text = format!("{before}\n{line}\n{after}");
            let out = r(&text);
            prop_assert!(!out.contains(&value), "{value:?} left in {out:?}");
            prop_assert!(out.contains(REDACTED));
        }
    }
}

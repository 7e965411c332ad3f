//! What a runner is told of test.requests (`SCENARIO`, loadgen's
//! [`loadgen::scenario::RequestSpec`] list as JSON) and the Secret files
//! it mounts for them; what the schema cannot check of a scenario. Pure.

use serde_json::{Value, json};

use crate::crd::{Checks, ScenarioRequest, TestSpec, is_header_name};
use crate::runner::SECRETS_DIR;

/// The largest `SCENARIO` a runner is given: an environment variable over
/// 128 KiB makes the kernel refuse to start the container (E2BIG), and the
/// pod's other variables need room too.
pub const MAX_SCENARIO_BYTES: usize = 96 * 1024;

/// The runners' `SCENARIO` value (None without test.requests) and the
/// projected volume's sources that put its Secret files in place.
pub fn runner_env(t: &TestSpec) -> Option<(String, Vec<Value>)> {
    if t.requests.is_empty() {
        return None;
    }
    let mut sources = Vec::new();
    let specs: Vec<loadgen::scenario::RequestSpec> = t
        .requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut spec = loadgen::scenario::RequestSpec {
                weight: u32::try_from(r.weight).unwrap_or(1),
                method: r.method.as_str().to_string(),
                path: r.path.clone(),
                headers: r.headers.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect(),
                body: r.body.clone(),
                ..Default::default()
            };
            for (j, h) in r.http_headers.iter().enumerate() {
                match (&h.value, &h.value_from) {
                    (Some(v), _) => spec.headers.push((h.name.clone(), v.0.clone())),
                    (None, Some(from)) => {
                        let file = format!("r{i}h{j}");
                        spec.header_files.push((h.name.clone(), format!("{SECRETS_DIR}/{file}").into()));
                        let k = &from.secret_key_ref;
                        sources.push(json!({"secret": {"name": k.name, "items": [{"key": k.key, "path": file}]}}));
                    }
                    // The schema requires exactly one of them.
                    (None, None) => {}
                }
            }
            if let Some(from) = &r.body_from {
                let file = format!("r{i}body");
                spec.body_file = Some(format!("{SECRETS_DIR}/{file}").into());
                let k = &from.secret_key_ref;
                sources.push(json!({"secret": {"name": k.name, "items": [{"key": k.key, "path": file}]}}));
            }
            if let Some(c) = checks_of(r, t) {
                spec.expect_status = c.status_codes.iter().filter_map(|s| u16::try_from(*s).ok()).collect();
                spec.expect_body_contains = c.body_contains.clone();
            }
            spec
        })
        .collect();
    Some((serde_json::to_string(&specs).unwrap_or_default(), sources))
}

/// A request's checks: its own, else the test's.
fn checks_of<'a>(r: &'a ScenarioRequest, t: &'a TestSpec) -> Option<&'a Checks> {
    r.checks.as_ref().or(t.checks.as_ref())
}

/// Why the runners could not send test.requests, beyond what the schema
/// checks: a header name that is no HTTP token, a body substring too long
/// in bytes, a scenario too large for the runners' environment.
pub fn problem(t: &TestSpec) -> Option<String> {
    for r in &t.requests {
        if let Some(bad) = r.headers.keys().chain(r.http_headers.iter().map(|h| &h.name)).find(|k| !is_header_name(k)) {
            return Some(format!("test.requests {}: header name {bad:?} is not an HTTP token", r.name));
        }
        if let Some(why) = r.checks.as_ref().and_then(Checks::invalid) {
            return Some(format!("test.requests {}: {why}", r.name));
        }
    }
    let bytes = runner_env(t).map_or(0, |(json, _)| crate::runner::literal_value(&json).len());
    (bytes > MAX_SCENARIO_BYTES).then(|| {
        format!(
            "test.requests makes {bytes} bytes of runner environment, more than {MAX_SCENARIO_BYTES}: move large bodies and headers to bodyFrom and valueFrom Secrets"
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn test_spec(v: Value) -> TestSpec {
        serde_json::from_value(v).unwrap()
    }

    /// Each request as written, its Secret values as files (never values),
    /// the test's checks the default of a request without its own; loadgen
    /// reads back exactly what the operator wrote.
    #[test]
    fn requests_become_loadgen_specs_with_secret_files() {
        let t = test_spec(json!({"serviceName": "web", "checks": {"statusCodes": [200]}, "requests": [
            {"name": "home", "weight": 8, "path": "/?q=1", "headers": {"X-A": "1"}},
            {"name": "cart", "weight": 2, "method": "POST", "path": "/cart",
             "httpHeaders": [{"name": "Authorization", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "t"}}},
                             {"name": "X-B", "value": "2"}],
             "bodyFrom": {"secretKeyRef": {"name": "payload", "key": "json"}},
             "checks": {"statusCodes": [201], "bodyContains": "added"}}
        ]}));
        let (json, sources) = runner_env(&t).unwrap();
        let specs: Vec<loadgen::scenario::RequestSpec> = serde_json::from_str(&json).unwrap();
        assert_eq!(specs[0].weight, 8);
        assert_eq!((specs[0].method.as_str(), specs[0].path.as_str()), ("GET", "/?q=1"));
        assert_eq!(specs[0].headers, [("X-A".to_string(), "1".to_string())]);
        assert_eq!(specs[0].expect_status, [200], "the test's checks");
        assert_eq!(specs[1].headers, [("X-B".to_string(), "2".to_string())]);
        assert_eq!(specs[1].header_files, [("Authorization".to_string(), format!("{SECRETS_DIR}/r1h0").into())]);
        assert_eq!(specs[1].body_file, Some(format!("{SECRETS_DIR}/r1body").into()));
        assert_eq!(
            (specs[1].expect_status.clone(), specs[1].expect_body_contains.as_deref()),
            (vec![201], Some("added"))
        );
        assert_eq!(
            sources,
            [
                json!({"secret": {"name": "tok", "items": [{"key": "t", "path": "r1h0"}]}}),
                json!({"secret": {"name": "payload", "items": [{"key": "json", "path": "r1body"}]}})
            ]
        );
        assert!(runner_env(&test_spec(json!({"serviceName": "web"}))).is_none());
        assert_eq!(problem(&t), None);
    }

    #[test]
    fn what_the_schema_cannot_check_is_a_problem_named() {
        let bad_name = test_spec(json!({"serviceName": "web", "requests": [{"name": "a", "headers": {"X A": "1"}}]}));
        assert!(problem(&bad_name).unwrap().contains("test.requests a: header name \"X A\""));
        let long = "é".repeat(600);
        let bad_check =
            test_spec(json!({"serviceName": "web", "requests": [{"name": "b", "checks": {"bodyContains": long}}]}));
        assert!(problem(&bad_check).unwrap().contains("test.requests b: test.checks.bodyContains is 1200 bytes"));
        let big: Vec<Value> = (0..8)
            .map(
                |i| json!({"name": format!("r{i}"), "body": "x".repeat(16384), "headers": {"X-Big": "y".repeat(4096)}}),
            )
            .collect();
        let too_big = test_spec(json!({"serviceName": "web", "requests": big}));
        assert!(problem(&too_big).unwrap().contains("more than 98304"), "{:?}", problem(&too_big));
    }
}

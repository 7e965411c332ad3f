//! load.capacity on the one-node cluster (issue 30). The capture server's
//! `/cgi-bin/slow` answers after 200 ms, and one runner may keep 3
//! connections open: about 14 requests/s is all it can serve on time,
//! beyond which requests are dropped (every connection busy when due),
//! which counts against a step. A search of 2, 9, 16 and 23 requests/s
//! (30 s a step) with `maxErrorRatio: 0.05` finds 9: the step at 16 misses,
//! the search stops there (the runner told to stop before the 23 step) and
//! the verdict passes, reason CapacityFound. Needs the loadgen image
//! (`cargo xtask images`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::node;
use load_tester::crd::{State, Verdict};
use serde_json::json;

#[tokio::test]
async fn a_capacity_search_finds_the_highest_step_served_and_stops_at_the_first_missed() {
    let env = node();
    let (client, ns, operator) = capture_namespace(&env, "lt-capacity").await;
    let spec = small(json!({"replicas": 1,
        "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/slow", "timeout": "5s"},
        "load": {"capacity": {"start": 2, "step": 7, "stepDuration": "30s", "max": 23}, "maxConnections": 3},
        "thresholds": {"maxErrorRatio": 0.05, "p99": "5s"}}));
    create(&client, &ns, "LoadTest", "search", spec).await.unwrap();
    let s = wait_test(&client, &ns, "search", "the search to end", Duration::from_secs(300), |s| {
        s.state.is_terminal().then(|| s.clone())
    })
    .await;
    eprintln!("{}\n{:?}\n{:?}", s.message, s.results.as_ref().map(|r| &r.capacity), s.progress);
    assert_eq!((s.state, s.verdict, s.reason.as_str()), (State::Finished, Verdict::Passed, "CapacityFound"), "{s:#?}");
    let r = s.results.clone().unwrap();
    let found = r.capacity.clone().unwrap();
    assert_eq!((found.rate, found.steps, found.planned), (9, 2, 4), "{r:#?}");
    assert!(found.limited_by.starts_with("the step at 16 requests/s"), "{found:?}");
    // Stopped live at the step that missed: the last step never ran.
    let aborted = s.progress.as_ref().map(|p| p.aborted.clone()).unwrap_or_default();
    assert!(aborted.starts_with("capacity search over: the step at 16 requests/s"), "{s:#?}");
    assert_eq!(r.stages.len(), 8);
    assert_eq!(r.stages[7].requests, 0, "the 23 requests/s step ran: {r:#?}");
    let events = events_about(&client, &ns, "search").await;
    assert!(events.iter().any(|(_, reason, _)| reason == "CapacityReached"), "{events:?}");
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

//! LeaderElector in-process against the real API: exclusivity, expiry,
//! release, and noticing another holder.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use flotilla_shared::config::LeaseTimings;
use flotilla_shared::leader::LeaderElector;
use flotilla_testenv::shared;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};

fn timings(lease: u64, renew: u64, retry_ms: u64) -> LeaseTimings {
    LeaseTimings {
        lease_duration: Duration::from_secs(lease),
        renew_deadline: Duration::from_secs(renew),
        retry_period: Duration::from_millis(retry_ms),
    }
}

#[tokio::test]
async fn only_one_candidate_leads_until_the_other_releases() {
    let env = shared();
    let ns = env.namespace("lease").await.unwrap();
    let t = timings(5, 3, 300);
    let a = LeaderElector::new(env.client().await, &ns, "one", "a", t);
    let b = LeaderElector::new(env.client().await, &ns, "one", "b", t);
    let la = a.acquire().await;
    let waiting = tokio::time::timeout(Duration::from_secs(3), b.acquire()).await;
    assert!(waiting.is_err(), "b must not acquire a lease a holds and renews");
    assert!(b.healthy(), "b reached the API while standing by");
    assert!(la.release().await.unwrap());
    let started = Instant::now();
    let lb = tokio::time::timeout(Duration::from_secs(3), b.acquire()).await.expect("b acquires after the release");
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    let lease = Api::<Lease>::namespaced(env.client().await, &ns).get("one").await.unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1), "one transition: a -> (released) -> b");
    lb.abandon();
}

#[tokio::test]
async fn an_abandoned_lease_is_taken_only_after_it_expires() {
    let env = shared();
    let ns = env.namespace("lease").await.unwrap();
    let t = timings(3, 2, 250);
    let a = LeaderElector::new(env.client().await, &ns, "two", "a", t);
    let b = LeaderElector::new(env.client().await, &ns, "two", "b", t);
    a.acquire().await.abandon();
    let started = Instant::now();
    let lb = b.acquire().await;
    let took = started.elapsed();
    eprintln!("abandoned lease taken after {took:?} (lease 3s, retry 250ms)");
    assert!(took >= Duration::from_secs(3), "taken before expiry: {took:?}");
    // Expiry and two retries, plus slack for a loaded 2-core machine; well
    // short of a second lease duration.
    assert!(took <= Duration::from_millis(3000 + 2 * 300 + 2300), "taken too late: {took:?}");
    lb.abandon();
}

/// Another holder written into the lease (a misbehaving or partitioned
/// peer) is not an instant loss: like client-go, the leader keeps trying to
/// renew until its renew deadline, and only then reports leadership lost.
#[tokio::test]
async fn a_leader_that_sees_another_holder_until_the_renew_deadline_reports_lost() {
    let env = shared();
    let ns = env.namespace("lease").await.unwrap();
    let a = LeaderElector::new(env.client().await, &ns, "three", "a", timings(6, 3, 200));
    let mut la = a.acquire().await;
    let api: Api<Lease> = Api::namespaced(env.client().await, &ns);
    api.patch(
        "three",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"holderIdentity": "intruder"}})),
    )
    .await
    .unwrap();
    let written = Instant::now();
    tokio::time::timeout(Duration::from_secs(8), la.lost()).await.expect("leadership lost");
    let took = written.elapsed();
    eprintln!("leadership lost {took:?} after the foreign write (renew deadline 3s)");
    assert!(la.is_lost());
    assert!(took >= Duration::from_millis(2500), "lost before the renew deadline: {took:?}");
}

//! One-off lists (not watches) of kinds a tenant writes, in pages, keeping
//! only what the caller takes of each object.
//!
//! A list answered in one piece is held whole while it is decoded, and a
//! tenant's objects can be ~1.5 MB each (etcd's bound; annotations alone
//! 256 KiB): 640 Deployments in a namespace made one 160 MB answer, past
//! the charts' 128Mi (issue 28, config-copier's rollouts). In pages (of
//! [`PAGE`] unless the caller asks another size), with only the kept parts
//! surviving each page, the peak is one page, whatever the tenant writes. Watches list another way
//! ([`crate::streaming_list`]).

use std::future::Future;

use kube::api::{ListParams, ObjectList};

/// Objects per page by default: at most ~15 MB held while a page of whole
/// objects is decoded.
pub const PAGE: u32 = 10;

/// Lists with `params` in pages of `params.limit` objects ([`PAGE`] when
/// unset or 0: a limit of 0 would be the whole list) (`fetch` makes one
/// request: `|p| api.list(&p)` or `list_metadata`), keeping what `keep`
/// returns of each object. The pages are one consistent snapshot
/// (`resourceVersion` unset); when it expires between pages (410 Gone,
/// compacted after ~5 minutes) the list starts over, once.
pub async fn list_kept<T, U, Fut>(
    params: &ListParams,
    mut fetch: impl FnMut(ListParams) -> Fut,
    mut keep: impl FnMut(T) -> Option<U>,
) -> Result<Vec<U>, kube::Error>
where
    T: Clone,
    Fut: Future<Output = Result<ObjectList<T>, kube::Error>>,
{
    let mut first = params.clone().limit(params.limit.filter(|l| *l > 0).unwrap_or(PAGE));
    first.continue_token = None;
    let (mut next, mut kept, mut restarted) = (first.clone(), Vec::new(), false);
    loop {
        let page = match fetch(next.clone()).await {
            Ok(page) => page,
            Err(kube::Error::Api(e)) if e.code == 410 && next.continue_token.is_some() && !restarted => {
                (next, kept, restarted) = (first.clone(), Vec::new(), true);
                continue;
            }
            Err(e) => return Err(e),
        };
        let token = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        kept.extend(page.items.into_iter().filter_map(&mut keep));
        match token {
            Some(token) => next = next.continue_token(&token),
            None => return Ok(kept),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use kube::core::ListMeta;
    use std::sync::Mutex;

    fn page(items: Vec<u32>, token: Option<&str>) -> ObjectList<u32> {
        ObjectList {
            types: Default::default(),
            metadata: ListMeta { continue_: token.map(str::to_string), ..Default::default() },
            items,
        }
    }

    fn gone() -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status::failure("continue token expired", "Expired").with_code(410)))
    }

    #[tokio::test]
    async fn pages_are_followed_and_only_the_kept_parts_returned() {
        let asked = Mutex::new(Vec::new());
        let kept = list_kept(
            &ListParams::default().labels("a=b"),
            |p: ListParams| {
                asked.lock().unwrap().push((p.limit, p.continue_token.clone(), p.label_selector.clone()));
                let out = match p.continue_token.as_deref() {
                    None => page(vec![1, 2], Some("t1")),
                    Some("t1") => page(vec![3, 4], Some("")),
                    Some(other) => panic!("unexpected token {other}"),
                };
                async move { Ok(out) }
            },
            |n| (n % 2 == 0).then_some(n * 10),
        )
        .await
        .unwrap();
        assert_eq!(kept, [20, 40]);
        let asked = asked.into_inner().unwrap();
        assert_eq!(asked.len(), 2, "an empty token ends the list");
        assert!(asked.iter().all(|(limit, _, labels)| *limit == Some(PAGE) && labels.as_deref() == Some("a=b")));
    }

    #[tokio::test]
    async fn the_callers_page_is_kept_and_a_zero_is_never_sent() {
        for (asked, sent) in [(Some(50), Some(50)), (Some(0), Some(PAGE)), (None, Some(PAGE))] {
            let seen = Mutex::new(None);
            let params = ListParams { limit: asked, ..Default::default() };
            let kept = list_kept(
                &params,
                |p: ListParams| {
                    *seen.lock().unwrap() = Some(p.limit);
                    async move { Ok(page(vec![1], None)) }
                },
                Some,
            )
            .await
            .unwrap();
            assert_eq!((kept, seen.into_inner().unwrap()), (vec![1], Some(sent)), "asked {asked:?}");
        }
    }

    #[tokio::test]
    async fn an_expired_snapshot_starts_the_list_over_once() {
        let calls = Mutex::new(0);
        let kept = list_kept(
            &ListParams::default(),
            |p: ListParams| {
                let n = {
                    let mut c = calls.lock().unwrap();
                    *c += 1;
                    *c
                };
                let out = match (n, p.continue_token.as_deref()) {
                    (1, None) => Ok(page(vec![1], Some("t"))),
                    (2, Some("t")) => Err(gone()),
                    (3, None) => Ok(page(vec![1], Some("t"))),
                    (4, Some("t")) => Ok(page(vec![2], None)),
                    (n, t) => panic!("call {n} with {t:?}"),
                };
                async move { out }
            },
            Some,
        )
        .await
        .unwrap();
        assert_eq!(kept, [1, 2], "nothing kept twice from the first attempt");
        // A second expiry is an error, not a loop.
        let calls = Mutex::new(0);
        let err = list_kept(
            &ListParams::default(),
            |p: ListParams| {
                *calls.lock().unwrap() += 1;
                let out = if p.continue_token.is_some() { Err(gone()) } else { Ok(page(vec![1], Some("t"))) };
                async move { out }
            },
            Some,
        )
        .await;
        assert!(matches!(err, Err(kube::Error::Api(ref e)) if e.code == 410), "{err:?}");
        assert_eq!(*calls.lock().unwrap(), 4);
    }
}

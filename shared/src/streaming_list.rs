//! Streaming lists (KEP-3157, `sendInitialEvents`): a watch's first list
//! arrives as one watch stream served from the API server's cache, object
//! by object, instead of as pages. For the pod watches, whose pages are
//! ten pods (a page of full Pods is what peaks memory), a 20,000-pod list
//! was 2,000 requests and did not finish in six minutes on a loaded API
//! server (issue 28); streamed, it is one request and one Pod held at a time.
//!
//! Tried first. A server that refuses them (Kubernetes 1.30, 1.31 and 1.33
//! ship the WatchList gate off and answer 422; 1.32 and 1.34+ have it on) gets
//! paginated lists instead, from then on, as client-go's WatchListClient
//! falls back. Those pages are consistent reads (`resourceVersion` unset):
//! asked with `resourceVersion=0` the API server answers from its cache in
//! one piece whatever the page size.
//!
//! Why every watch of a kind a tenant writes lists this way: a list's
//! answer is held whole while it is decoded, so its size is the operator's
//! peak. Objects' metadata alone can be 256 KiB each (annotations) and a
//! Secret 1 MiB; a tenant with `edit` in any namespace could otherwise
//! make one answer hold hundreds of MiB — past the chart's memory limit,
//! the operator killed at every start (issue 28). Streamed, the peak is
//! the largest object.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt};
use kube::Api;
use kube::runtime::watcher;

/// Objects per page at most when the server does not stream lists: 50
/// objects of 256 KiB of metadata are 12.5 MiB (kube's default page, 500,
/// would be 125 MiB).
pub const FALLBACK_PAGE: u32 = 50;

/// How one watch lists: streamed until the server refuses it once.
#[derive(Debug)]
pub struct InitialList {
    streaming: AtomicBool,
}

impl Default for InitialList {
    fn default() -> Self {
        Self { streaming: AtomicBool::new(true) }
    }
}

impl InitialList {
    /// `base` as the next list should run: streamed, unless refused before;
    /// then in consistent pages (of `base`'s size, at most [`FALLBACK_PAGE`]).
    pub fn config(&self, base: &watcher::Config) -> watcher::Config {
        if self.streaming.load(Ordering::Relaxed) {
            return base.clone().streaming_lists();
        }
        let mut paged = base.clone();
        paged.list_semantic = watcher::ListSemantic::MostRecent;
        paged.page_size = Some(paged.page_size.unwrap_or(FALLBACK_PAGE).min(FALLBACK_PAGE));
        paged
    }

    /// Whether this watch streams its lists (until a refusal).
    pub fn streaming(&self) -> bool {
        self.streaming.load(Ordering::Relaxed)
    }

    /// Records `e` if it is the server refusing streaming lists: true when
    /// the watch should start over with paginated lists.
    pub fn refused(&self, e: &watcher::Error) -> bool {
        if !refuses_streaming(e) || !self.streaming.swap(false, Ordering::Relaxed) {
            return false;
        }
        tracing::info!(error = %e, "the API server does not stream lists (its WatchList feature is off): listing in pages");
        true
    }
}

/// kube's watcher of `api` with `base`'s selectors, its lists streamed
/// until the server refuses once, then paginated ([`InitialList`]). The
/// refusal is not passed on: it says nothing of the watch's health (an
/// API server of 1.30, 1.31 or 1.33 refuses at every start), and a watch
/// error would mark the caches unready and read as the RBAC refusing.
/// It cannot repeat: [`InitialList::refused`] holds once.
pub fn watch<K>(
    api: Api<K>,
    base: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + use<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let initial = Arc::new(InitialList::default());
    let first = kube::runtime::watcher(api.clone(), initial.config(&base)).boxed();
    futures::stream::unfold((first, api, base, initial), |(mut current, api, base, initial)| async move {
        loop {
            let item = current.next().await?;
            if let Err(e) = &item
                && initial.refused(e)
            {
                current = kube::runtime::watcher(api.clone(), initial.config(&base)).boxed();
                continue;
            }
            return Some((item, (current, api, base, initial)));
        }
    })
}

/// Whether `e` is an API server refusing `sendInitialEvents` (a server
/// without the WatchList feature validates the parameter and answers 422
/// Invalid, or 400 from some proxies, naming it).
pub fn refuses_streaming(e: &watcher::Error) -> bool {
    let status = match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) | watcher::Error::WatchFailed(kube::Error::Api(s)) => {
            s.as_ref()
        }
        watcher::Error::WatchError(s) => s.as_ref(),
        _ => return false,
    };
    matches!(status.code, 400 | 422)
        && (status.message.contains("sendInitialEvents") || status.message.contains("resourceVersionMatch"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kube::core::Status;

    fn status(code: u16, message: &str) -> Box<Status> {
        let mut s = Status::failure(message, "Invalid");
        s.code = code;
        Box::new(s)
    }

    #[test]
    fn a_refusal_of_send_initial_events_falls_back_once() {
        // What a 1.33 API server answers (its WatchList gate off).
        let refusal = watcher::Error::WatchStartFailed(kube::Error::Api(status(
            422,
            r#"ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"#,
        )));
        let list = InitialList::default();
        assert!(list.streaming());
        assert_eq!(
            list.config(&watcher::Config::default()).initial_list_strategy,
            watcher::InitialListStrategy::StreamingList
        );
        assert!(list.refused(&refusal), "the watch starts over");
        assert!(!list.streaming());
        let paged = list.config(&watcher::Config::default().any_semantic());
        assert_eq!(paged.initial_list_strategy, watcher::InitialListStrategy::ListWatch);
        // resourceVersion=0 would be answered in one piece from the cache.
        assert_eq!(paged.list_semantic, watcher::ListSemantic::MostRecent);
        assert_eq!(paged.page_size, Some(FALLBACK_PAGE));
        assert_eq!(list.config(&watcher::Config::default().page_size(10)).page_size, Some(10));
        assert_eq!(list.config(&watcher::Config::default().page_size(500)).page_size, Some(FALLBACK_PAGE));
        assert!(!list.refused(&refusal), "once: already paginated");
    }

    #[test]
    fn other_errors_keep_streaming() {
        let list = InitialList::default();
        let forbidden = watcher::Error::WatchStartFailed(kube::Error::Api(status(403, "pods is forbidden")));
        let gone = watcher::Error::WatchError(status(410, "too old resource version"));
        let invalid = watcher::Error::WatchStartFailed(kube::Error::Api(status(422, "labelSelector: Invalid value")));
        for e in [forbidden, gone, invalid, watcher::Error::NoResourceVersion] {
            assert!(!list.refused(&e), "{e}");
        }
        assert!(list.streaming());
    }
}

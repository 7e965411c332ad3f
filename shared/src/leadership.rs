//! Whether this process may act now, for work that outlives a reconcile
//! (a queue of notifications, a sync loop): such work must stop where a
//! reconcile would be cancelled — while the leader's term is suspended, its
//! successor may already be doing the same work.

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The leader election's state and the shutdown token. Cheap to clone; get
/// it from [`crate::Context::leadership`].
#[derive(Clone, Debug)]
pub struct Leadership {
    leading: watch::Receiver<bool>,
    shutdown: CancellationToken,
}

impl Leadership {
    /// `leading` is `true` while this process leads (from the start without
    /// leader election). Operators get theirs from the context; tests and
    /// embedders build one from a channel they drive.
    pub fn new(leading: watch::Receiver<bool>, shutdown: CancellationToken) -> Self {
        Self { leading, shutdown }
    }

    /// Resolves once this process leads; `false` when shutdown comes first.
    pub async fn leading(&self) -> bool {
        wait_leading(self.leading.clone(), &self.shutdown).await
    }

    /// Whether this process leads now.
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Resolves when leading turns false (a suspended term, `leader.rs`);
    /// never without leader election.
    pub async fn suspended(&self) {
        suspended(self.leading.clone()).await;
    }
}

/// Resolves when `leading` turns false; never if its sender is gone.
pub(crate) async fn suspended(mut leading: watch::Receiver<bool>) {
    if leading.wait_for(|l| !*l).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Whether `leading` became true before `shutdown`.
pub(crate) async fn wait_leading(mut leading: watch::Receiver<bool>, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        r = leading.wait_for(|l| *l) => r.is_ok(),
        () = shutdown.cancelled() => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn follows_the_term_and_gives_up_at_shutdown() {
        let (tx, rx) = watch::channel(false);
        let shutdown = CancellationToken::new();
        let l = Leadership::new(rx, shutdown.clone());
        assert!(!l.is_leading());
        let waiting = tokio::spawn({
            let l = l.clone();
            async move { l.leading().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "resolved before the lease was won");
        tx.send(true).unwrap();
        assert!(waiting.await.unwrap());
        assert!(l.is_leading());

        let suspended = tokio::spawn({
            let l = l.clone();
            async move { l.suspended().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!suspended.is_finished(), "suspended while leading");
        tx.send(false).unwrap();
        suspended.await.unwrap();

        shutdown.cancel();
        assert!(!l.leading().await, "a shutdown while not leading must end the wait with false");
    }
}

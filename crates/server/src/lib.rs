//! `plumb serve`: an OpenAI-compatible HTTP server over the plumb engine.
//!
//! Every request is checked field by field before it reaches the engine, so that a bad one
//! gets a 4xx that names its field and never disturbs the others. Requests that pass are
//! tokenized (chat through the model's template) and submitted to the [`Generator`]; its
//! events come back through a channel and are answered whole or streamed as server-sent
//! events. A client that goes away closes the channel, which tells the engine to drop the
//! request at its next step.

mod auth;
mod body;
mod chat;
mod completions;
mod error;
mod generation;
mod metrics;
mod response;
mod routes;
mod state;
mod streaming;
mod tokenize;
mod validation;
mod web;

#[cfg(test)]
mod test_support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use generation::Generator;
pub use routes::router;
pub use state::{AppState, ServerConfig};
pub use validation::Defaults;

/// How long requests still running at shutdown may take to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves the API on `listener` until `shutdown` completes; then waits for the requests in
/// flight, [`SHUTDOWN_GRACE`] at most.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stop = Arc::new(tokio::sync::Notify::new());
    let graceful = {
        let stop = stop.clone();
        async move { stop.notified().await }
    };
    let server = axum::serve(listener, router(state)).with_graceful_shutdown(graceful);
    let deadline = async {
        shutdown.await;
        // notify_one keeps the permit if the server has not started waiting yet.
        stop.notify_one();
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        tracing::warn!("requests still running at shutdown were cut off");
    };
    tokio::select! {
        result = server => result,
        () = deadline => Ok(()),
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(%err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

//! The `/metrics` endpoint ([`serve`]): hyper's HTTP/1 server on a tokio
//! runtime of one thread, with limits, so that a program that serves its
//! cache's metrics holds up under clients that misbehave (issue 66: a
//! thread per connection and whole buffered headers let a thousand idle
//! connections or a 100 MB header take the program's threads, memory and
//! descriptors).
//!
//! Why hyper on a current-thread runtime rather than a loop of our own
//! over poll(2): hyper is the HTTP/1 implementation most of the Rust
//! ecosystem serves through (well kept, fuzzed), and it has the limits a
//! server needs built in (a read buffer with a ceiling answered 431, a
//! timer on the request head); what remains ours is the accept loop and
//! the connection bound, a few dozen lines. One thread serves every
//! connection, each a task.
//!
//! The limits:
//! - at most [`MAX_CONNECTIONS`] connections open; a connection past it
//!   closes the oldest (gracefully: an idle one, or one still sending its
//!   head, at once; one being answered after its answer, within
//!   [`CLOSE_GRACE`]), so that the server never stops accepting and a
//!   scraper always gets in, and the server's descriptors stay
//!   `MAX_CONNECTIONS` + 3 (the listener, the epoll instance and its
//!   waker) whatever its clients do: it never takes the descriptors the
//!   cache needs for its files;
//! - [`HEAD_TIMEOUT`] for a request's whole head, counted from the moment
//!   the connection waits for it (a new connection, or a kept-alive one
//!   after its last answer): a client that sends nothing, or its head a
//!   byte at a time, is closed;
//! - [`MAX_HEAD`] bytes of request head, read incrementally into a buffer
//!   of at most that size: a longer head is answered 431 and closed;
//! - an accept that fails (out of descriptors, a connection aborted
//!   before it was accepted) is retried after [`ACCEPT_BACKOFF`]; nothing
//!   ends the accept loop but dropping the server.

use std::cell::RefCell;
use std::convert::Infallible;
use std::fmt;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::Duration;

use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};
use tokio::task::LocalSet;

/// The most connections open at once (see the module's doc).
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// How long a connection may take to send a request's head, from the
/// moment it is waited for.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest request head (request line and headers), in bytes; hyper's
/// smallest read buffer ceiling.
pub(crate) const MAX_HEAD: usize = 8 << 10;
/// How long a failed accept waits before the next.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long a connection asked to close may finish the answer it is
/// writing (to a client that does not read it) before it is cut.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The content type of the OpenMetrics text `prometheus-client` encodes,
/// which Prometheus scrapes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A running `/metrics` endpoint, from [`serve`]; dropping it stops the
/// server, closes its connections and joins its thread.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl MetricsServer {
    /// The address it listens on (the port the system chose, for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        // The thread's runtime stops at the signal (or at the sender's
        // drop) and drops its connections with it.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `registry` as Prometheus (OpenMetrics) text at `GET /metrics`
/// (and `HEAD`) on `addr`, from a thread of its own, until the returned
/// server is dropped. Other paths answer 404, other methods 405.
///
/// One thread serves every connection, with limits (docs/metrics.md): at
/// most 64 connections (a new one past it closes the oldest, so accepting
/// never stops), a request head within 10 s and 8 KiB (431 past it), and
/// accepts that fail (out of descriptors) retried, never the end of
/// serving. Its descriptors stay under 70, whatever its clients do.
///
/// Bind to a loopback address unless the metrics may be read from
/// elsewhere: they say which files are busy, not what they hold, but
/// nothing authenticates a scraper.
///
/// # Errors
/// The address cannot be bound (in use, not local, no permission), or the
/// thread or its runtime cannot be made.
pub fn serve(addr: SocketAddr, registry: Registry) -> io::Result<MetricsServer> {
    let context = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("foliocache: serving metrics on {addr}: {e}"),
        )
    };
    let std_listener = std::net::TcpListener::bind(addr).map_err(context)?;
    std_listener.set_nonblocking(true).map_err(context)?;
    let bound = std_listener.local_addr().map_err(context)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(context)?;
    let listener = {
        let _in_runtime = runtime.enter();
        TcpListener::from_std(std_listener).map_err(context)?
    };
    let (stop, stopped) = oneshot::channel();
    let (started, running) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("foliocache-metrics".into())
        .spawn(move || {
            let tasks = LocalSet::new();
            let _ = started.send(());
            let serving = tasks.run_until(accept_loop(listener, Rc::new(registry)));
            runtime.block_on(first_of(serving, stopped));
            // Dropping the tasks closes every connection still open.
            let _in_runtime = runtime.enter();
            drop(tasks);
        })
        .map_err(context)?;
    // Returns once the thread runs: its start (its first allocations
    // included) is over when the caller goes on, which under the
    // interposer is a program in the middle of an open.
    let _ = running.recv();
    Ok(MetricsServer {
        addr: bound,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// Runs `a` until it or `b` completes.
async fn first_of(a: impl Future, b: impl Future) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready() || b.as_mut().poll(cx).is_ready() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}

/// The connections open, for the bound.
#[derive(Default)]
struct Connections {
    /// Connection tasks running, closing ones included.
    open: usize,
    /// Whether one was asked to close and has not yet.
    closing: bool,
    /// The close signals of those not asked yet, oldest first.
    signals: std::collections::BTreeMap<u64, oneshot::Sender<()>>,
    next: u64,
}

/// A connection task's place among the [`Connections`]; leaving it (the
/// task's end, or its drop with the runtime) frees the place.
struct Place {
    id: u64,
    all: Rc<RefCell<Connections>>,
    freed: Rc<Notify>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut all = self.all.borrow_mut();
        all.open -= 1;
        if all.signals.remove(&self.id).is_none() {
            all.closing = false;
        }
        self.freed.notify_one();
    }
}

/// Accepts connections until the runtime stops, never ending on an
/// error, each served by a task of its own.
async fn accept_loop(listener: TcpListener, registry: Rc<Registry>) {
    let all = Rc::new(RefCell::new(Connections::default()));
    let freed = Rc::new(Notify::new());
    let mut failing = false;
    loop {
        make_room(&all, &freed).await;
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // EMFILE or ENFILE (out of descriptors: some will free),
                // ECONNABORTED (the client gave up first), ENOBUFS...:
                // none is a reason to stop serving.
                if !failing {
                    log::warn!("foliocache: metrics: accepting a connection: {e} (retrying)");
                }
                failing = true;
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        failing = false;
        let (signal, close) = oneshot::channel();
        let place = {
            let mut a = all.borrow_mut();
            let id = a.next;
            a.next += 1;
            a.open += 1;
            a.signals.insert(id, signal);
            Place {
                id,
                all: all.clone(),
                freed: freed.clone(),
            }
        };
        tokio::task::spawn_local(connection(stream, registry.clone(), close, place));
    }
}

/// Waits until a connection more may open: at the bound, asks the oldest
/// to close (one at a time) and waits for a place to free.
async fn make_room(all: &RefCell<Connections>, freed: &Notify) {
    loop {
        {
            let mut a = all.borrow_mut();
            if a.open < MAX_CONNECTIONS {
                return;
            }
            if !a.closing {
                if let Some((_, signal)) = a.signals.pop_first() {
                    a.closing = true;
                    let _ = signal.send(());
                }
            }
        }
        freed.notified().await;
    }
}

/// Serves one connection until the client closes it, a limit cuts it, or
/// it is asked to close (then it finishes an answer in progress, for at
/// most [`CLOSE_GRACE`]).
async fn connection(
    stream: TcpStream,
    registry: Rc<Registry>,
    close: oneshot::Receiver<()>,
    _place: Place,
) {
    let service = service_fn(move |req| {
        let response = answer(&req, &registry);
        async move { Ok::<_, Infallible>(response) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(stream), service);
    let mut conn = pin!(conn);
    let mut close = pin!(close);
    // Its end (an error is the client's business), or the signal.
    let asked = poll_fn(|cx| match conn.as_mut().poll(cx) {
        Poll::Ready(_) => Poll::Ready(false),
        Poll::Pending => close.as_mut().poll(cx).map(|_| true),
    })
    .await;
    if asked {
        conn.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
    }
}

/// The response to one request.
fn answer<B>(req: &Request<B>, registry: &Registry) -> Response<String> {
    let text = |status: StatusCode, body: String, content_type: &'static str| {
        let mut r = Response::new(body);
        *r.status_mut() = status;
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    if req.uri().path() != "/metrics" {
        let body = "not found: metrics are at /metrics\n".into();
        return text(StatusCode::NOT_FOUND, body, "text/plain");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD\n".into(),
            "text/plain",
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, registry) {
        Ok(()) => text(StatusCode::OK, body, OPENMETRICS),
        Err(e) => {
            let body = format!("encoding the metrics: {e}\n");
            text(StatusCode::INTERNAL_SERVER_ERROR, body, "text/plain")
        }
    }
}

#[cfg(test)]
mod tests;

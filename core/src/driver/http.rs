//! One HTTP exchange with ureq, mapped onto the core's inputs.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ureq::Agent;
use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

use super::clock;
use crate::{Response, TransportFailure};

/// The largest response body the driver reads (1 MiB). A longer body is
/// not read: the response reaches the core with its status, its headers
/// and an empty body, which the core classifies by status as a response
/// with no usable body (P-3; a 200 is then ambiguous, a 404 `not_found`).
pub const MAX_BODY_BYTES: u64 = 1 << 20;

/// Size of each connection's input and output buffer.
const BUFFER_BYTES: usize = 16 * 1024;

/// Builds the agent every request shares: 4xx/5xx are responses, not errors;
/// no redirects are followed (a 3xx reaches the core as it arrived); no proxy
/// from the environment; no user agent surprises.
pub(crate) fn agent(max_workers: usize) -> Agent {
    let config = Agent::config_builder()
        // Keep one idle connection per worker (and per host) alive.
        .max_idle_connections(max_workers.max(1) * 4)
        .max_idle_connections_per_host(max_workers.max(1))
        // Each connection's buffers (ureq's default is 128 KiB each way, 4
        // MiB for 16 pooled connections): requests and response heads here
        // are small; a larger head still fits (the input buffer grows up to
        // the 64 KiB response-head limit).
        .input_buffer_size(BUFFER_BYTES)
        .output_buffer_size(BUFFER_BYTES)
        .http_status_as_error(false)
        .max_redirects(0)
        .max_redirects_will_error(false)
        .proxy(None)
        .user_agent(concat!("leasebeat/", env!("CARGO_PKG_VERSION")))
        .build();
    Agent::with_parts(
        config,
        DefaultConnector::default(),
        CachingResolver::default(),
    )
}

/// How long a resolved server address is reused.
const RESOLVE_REUSE: Duration = Duration::from_secs(10);

/// ureq resolves the host before every request, pooled connection or not,
/// and its default resolver runs each lookup on a new thread whenever the
/// request has a timeout (every request of the driver has one). At 2,000
/// beats per second that was 2,000 threads started and ended per second:
/// four memory-map system calls each, contending on the process's memory
/// map with every page fault, and beats delayed by up to 100 ms on a loaded
/// machine. This resolver asks ureq's default one (same timeout, same
/// address-family filter) at most once per [`RESOLVE_REUSE`] per
/// `scheme://host:port`, and reuses its answer meanwhile. A failed lookup
/// is not kept.
#[derive(Debug, Default)]
struct CachingResolver {
    inner: DefaultResolver,
    known: Mutex<HashMap<String, (Instant, Vec<SocketAddr>)>>,
}

impl Resolver for CachingResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let name = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or(""),
            uri.authority().map_or("", |a| a.as_str())
        );
        let now = Instant::now();
        let fresh = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&name)
            .filter(|(at, _)| now.duration_since(*at) < RESOLVE_REUSE)
            .map(|(_, addrs)| addrs.clone());
        if let Some(addrs) = fresh {
            // (`Resolver::empty` does not exist in ureq 3.0.)
            let mut out = ResolvedSocketAddrs::from_fn(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            for a in addrs {
                out.push(a);
            }
            return Ok(out);
        }
        let addrs = self.inner.resolve(uri, config, timeout)?;
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, (now, addrs.to_vec()));
        Ok(addrs)
    }
}

/// One POST: `url`, API key header, idempotency key header (when given),
/// JSON body, bounded by `timeout` end to end (connect, send, receive,
/// body). Returns the complete response or the transport failure, and the
/// monotonic time at which it was observed.
pub(crate) fn post(
    agent: &Agent,
    url: &str,
    api_key: &str,
    idempotency_key: Option<&str>,
    body: &[u8],
    timeout: Duration,
) -> (Result<Response, TransportFailure>, u64) {
    let result = post_inner(agent, url, api_key, idempotency_key, body, timeout);
    (result, clock::now_ns())
}

fn post_inner(
    agent: &Agent,
    url: &str,
    api_key: &str,
    idempotency_key: Option<&str>,
    body: &[u8],
    timeout: Duration,
) -> Result<Response, TransportFailure> {
    let mut request = agent
        .post(url)
        .header("X-Cycles-API-Key", api_key)
        .header("Content-Type", "application/json");
    if let Some(key) = idempotency_key {
        request = request.header("X-Idempotency-Key", key);
    }
    let mut response = request
        .config()
        .timeout_global(Some(timeout))
        .build()
        .send(body)
        .map_err(map_error)?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    let declared_too_long = response
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > MAX_BODY_BYTES);
    let body = if declared_too_long {
        // Not read: dropping the response closes the connection.
        Vec::new()
    } else {
        match response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
        {
            Ok(body) => body,
            // A chunked (or close-delimited) body over the limit: the
            // status is complete, the body is not usable.
            Err(ureq::Error::BodyExceedsLimit(_)) => Vec::new(),
            Err(e) => return Err(map_error(e)),
        }
    };
    Ok(Response {
        status,
        headers,
        body,
        timing: crate::Timing::Measured,
    })
}

/// ureq error -> transport failure: timeouts are `Timeout`; refused
/// connections, unreachable hosts and DNS failures are `Connect`; resets,
/// early EOF, protocol errors and anything else are `Reset` (no complete
/// response was observed).
pub(crate) fn map_error(e: ureq::Error) -> TransportFailure {
    match e {
        ureq::Error::Timeout(_) => TransportFailure::Timeout,
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => TransportFailure::Connect,
        ureq::Error::Io(io) => map_io(&io),
        _ => TransportFailure::Reset,
    }
}

fn map_io(e: &io::Error) -> TransportFailure {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => TransportFailure::Timeout,
        io::ErrorKind::ConnectionRefused
        | io::ErrorKind::AddrNotAvailable
        | io::ErrorKind::HostUnreachable
        | io::ErrorKind::NetworkUnreachable
        | io::ErrorKind::NotFound => TransportFailure::Connect,
        _ => TransportFailure::Reset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(r: &CachingResolver, url: &str) -> Vec<SocketAddr> {
        let uri: Uri = url.parse().expect("uri");
        r.resolve(&uri, &Config::default(), NextTimeout::default())
            .expect("resolved")
            .to_vec()
    }

    #[test]
    fn a_resolved_address_is_reused_until_it_is_ten_seconds_old() {
        let r = CachingResolver::default();
        let real: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(resolve(&r, "http://127.0.0.1:9/v1/x"), vec![real]);
        // A planted answer proves the next lookup reads the cache, not DNS.
        let planted: SocketAddr = "10.0.0.1:9".parse().unwrap();
        let name = "http://127.0.0.1:9".to_owned();
        r.known
            .lock()
            .unwrap()
            .insert(name.clone(), (Instant::now(), vec![planted]));
        assert_eq!(resolve(&r, "http://127.0.0.1:9/v1/y"), vec![planted]);
        // Another port is another name.
        assert_eq!(
            resolve(&r, "http://127.0.0.1:10/"),
            vec!["127.0.0.1:10".parse::<SocketAddr>().unwrap()]
        );
        // Older than RESOLVE_REUSE: looked up again.
        let old = Instant::now()
            .checked_sub(RESOLVE_REUSE + Duration::from_secs(1))
            .expect("a clock older than 11 s");
        r.known.lock().unwrap().insert(name, (old, vec![planted]));
        assert_eq!(resolve(&r, "http://127.0.0.1:9/v1/z"), vec![real]);
    }
}

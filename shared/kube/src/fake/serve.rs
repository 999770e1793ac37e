//! One HTTP request, start to end: read, checked against the injected failures, routed
//! ([`Route`]) to a handler or a watch under the server's lock, logged, then answered —
//! a whole body, or a watch streamed without the lock — counting the bytes sent.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use serde_json::Value;

use super::answer::{Answer, injected_answer, status_answer, version_answer};
use super::resource::handle_resource;
use super::store::{ResourceType, Store};
use super::watch::{self, WatchBody};
use super::{RecordedRequest, Shared, State};

/// What a request is answered: a whole answer, or a watch to stream.
pub(super) enum Served {
    Answer(Answer),
    Watch(watch::Opened),
}

impl Served {
    fn status(&self) -> u16 {
        match self {
            Served::Answer(answer) => answer.status().as_u16(),
            Served::Watch(_) => 200,
        }
    }

    fn into_response(self, shared: &Arc<Shared>) -> Response<Body> {
        match self {
            Served::Answer(answer) => {
                answer.map(|bytes| Body::new(shared, Content::Whole(Some(bytes))))
            }
            Served::Watch(opened) => {
                let stream = Box::new(WatchBody::new(opened, shared.clone()));
                let mut response = Response::new(Body::new(shared, Content::Stream(stream)));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                response
            }
        }
    }
}

/// Every response body: counts what it sends for [`FakeApiServer::bytes_served`].
pub(super) struct Body {
    shared: Arc<Shared>,
    content: Content,
}

enum Content {
    /// Sent in one frame, with a Content-Length.
    Whole(Option<Bytes>),
    /// Chunked, as long as the watch lasts.
    Stream(Box<WatchBody>),
}

impl Body {
    fn new(shared: &Arc<Shared>, content: Content) -> Body {
        Body {
            shared: shared.clone(),
            content,
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        let polled = match &mut this.content {
            Content::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Content::Stream(stream) => Pin::new(stream.as_mut()).poll_frame(cx),
        };
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            this.shared
                .bytes_served
                .fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.content {
            Content::Whole(bytes) => bytes.is_none(),
            Content::Stream(stream) => stream.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.content {
            Content::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Content::Stream(_) => SizeHint::default(),
        }
    }
}

pub(super) async fn serve(shared: &Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let answer = status_answer(400, "BadRequest", &format!("reading the body: {e}"), None);
            return Served::Answer(answer).into_response(shared);
        }
    };
    let header = |name: http::header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let content_type = header(http::header::CONTENT_TYPE);
    let watch = watch::requested(&parts.method, &query);

    // The lock is released before the answer is sent: a watch streams without it.
    let mut state = shared.state();
    let injected = state
        .failures
        .iter()
        .position(|f| f.applies_to(&parts.method, &path, watch))
        .and_then(|i| state.failures.remove(i));
    let forbidden = state.forbidden.contains(&path);
    let served = match injected {
        None if forbidden => Served::Answer(injected_answer(403)),
        Some(failure) if watch && failure.status == 410 => {
            Served::Answer(watch::expired("injected 410 (Expired)"))
        }
        Some(failure) => Served::Answer(injected_answer(failure.status)),
        None => {
            let call = Call {
                method: &parts.method,
                path: &path,
                query: &query,
                content_type: content_type.as_deref(),
                body: body.as_ref(),
                watch,
            };
            handle(&mut state, &call)
        }
    };
    if let Some(i) = state
        .hooks
        .iter()
        .position(|h| h.path == path && h.method == parts.method)
    {
        let hook = state.hooks.remove(i);
        (hook.hook)(&mut state.store);
    }
    state.log.push(RecordedRequest {
        method: parts.method.to_string(),
        path,
        query,
        content_type,
        authorization: header(http::header::AUTHORIZATION),
        user_agent: header(http::header::USER_AGENT),
        body,
        status: served.status(),
        watch,
    });
    drop(state);
    served.into_response(shared)
}

/// A request as the handlers see it.
pub(super) struct Call<'a> {
    pub(super) method: &'a Method,
    pub(super) path: &'a str,
    pub(super) query: &'a str,
    pub(super) content_type: Option<&'a str>,
    pub(super) body: Option<&'a Value>,
    /// A GET with `watch=true`.
    pub(super) watch: bool,
}

/// Where a request goes: `/api/v1/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]`
/// or `/apis/{group}/{version}/...` likewise.
#[derive(Debug, Clone)]
pub struct Route {
    pub resource: ResourceType,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

enum Routed {
    Version,
    Resource(Route),
    NotFound,
}

fn route(store: &Store, path: &str) -> Routed {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Routed::Version,
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Routed::NotFound,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, rest @ ..] => {
            (Some(ns.to_string()), [&[*plural], rest].concat())
        }
        rest => (None, rest.to_vec()),
    };
    let (plural, name, subresource) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Routed::NotFound,
    };
    let Some(resource) = store.resource_type(group, version, plural) else {
        return Routed::NotFound;
    };
    // A namespace on a cluster-scoped kind is not a path the server has.
    if namespace.is_some() && !resource.namespaced {
        return Routed::NotFound;
    }
    Routed::Resource(Route {
        resource: resource.clone(),
        namespace,
        name,
        subresource,
    })
}

fn handle(state: &mut State, call: &Call) -> Served {
    let route = match route(&state.store, call.path) {
        Routed::Version if call.method == Method::GET => {
            return Served::Answer(version_answer(&state.version));
        }
        Routed::Resource(route) => route,
        Routed::Version | Routed::NotFound => {
            return Served::Answer(status_answer(
                404,
                "NotFound",
                "the server could not find the requested resource",
                None,
            ));
        }
    };
    // `watch` on one object's path is not a watch: the server answers a GET.
    if call.watch && route.name.is_none() {
        return watch::open(
            &mut state.store,
            &route,
            call.query,
            state.bookmark_interval,
        );
    }
    Served::Answer(handle_resource(&mut state.store, &route, call))
}

/// The query parameter `name`, percent-decoded.
pub(super) fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| Some(hex(*bytes.get(i + 1)?)? * 16 + hex(*bytes.get(i + 2)?)?))
            .flatten();
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b as u8);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_percent_decoded() {
        assert_eq!(
            query_param("limit=2&continue=a%2Fb", "continue").as_deref(),
            Some("a/b")
        );
        assert_eq!(query_param("limit=2", "continue"), None);
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn paths_route_to_resources() {
        let store = Store::default();
        let Routed::Resource(r) = route(
            &store,
            "/api/v1/namespaces/kube-system/pods/coredns/eviction",
        ) else {
            panic!("not routed");
        };
        assert_eq!(
            (
                r.resource.kind,
                r.namespace.as_deref(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            (
                "Pod",
                Some("kube-system"),
                Some("coredns"),
                Some("eviction")
            )
        );
        assert!(matches!(
            route(&store, "/apis/karpenter.sh/v1/nodepools"),
            Routed::Resource(_)
        ));
        assert!(matches!(
            route(&store, "/apis/karpenter.sh/v1beta1/nodepools"),
            Routed::NotFound
        ));
        assert!(matches!(
            route(&store, "/api/v1/namespaces/x/nodes"),
            Routed::NotFound
        ));
        assert!(matches!(route(&store, "/version"), Routed::Version));
    }
}

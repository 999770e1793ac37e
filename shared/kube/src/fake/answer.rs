//! What the fake answers, as the API server writes it: JSON bodies, `metav1.Status`
//! failures (also the object of a watch's ERROR event), injected errors and `/version`.

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::Version;

/// A whole answer (anything but a watch stream).
pub(super) type Answer = Response<Bytes>;

pub(super) fn version_answer(version: &Version) -> Answer {
    json_answer(
        200,
        &json!({
            "major": version.major,
            "minor": version.minor,
            "gitVersion": version.git_version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }),
    )
}

pub(super) fn injected_answer(status: u16) -> Answer {
    let reason = match status {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    };
    let mut answer = status_answer(
        status,
        reason,
        &format!("injected {status} ({reason})"),
        None,
    );
    if status == 429 {
        answer.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
    }
    answer
}

/// A `metav1.Status` failure, as the API server answers errors.
pub(super) fn status_answer(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Answer {
    json_answer(code, &status_value(code, reason, message, details))
}

/// A `metav1.Status` failure: the body of an error answer, or the object of a watch's
/// ERROR event.
pub(super) fn status_value(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    status
}

pub(super) fn json_answer(code: u16, body: &Value) -> Answer {
    let mut answer = Response::new(Bytes::from(body.to_string()));
    *answer.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    answer
}

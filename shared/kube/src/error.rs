//! Classifying kube-rs errors into the engine's [`ErrorKind`]s.
//!
//! Classification looks at the HTTP status code of the API server's `Status` (and at its
//! machine-readable `reason` when a proxy left the code out), and at the error's type for
//! transport failures. Never at message text. The kube error is kept as the source.

use nodewright_engine::ports::{ClusterError, ErrorKind};

use crate::client::TokenError;

/// Wraps a kube error as a [`ClusterError`], saying what was being done.
pub(crate) fn cluster_error(doing: impl Into<String>, error: kube::Error) -> ClusterError {
    ClusterError::with_source(classify(&error), doing, error)
}

/// The kind of a kube-rs error.
pub fn classify(error: &kube::Error) -> ErrorKind {
    match error {
        kube::Error::Api(status) => match status.code {
            0 => kind_of_reason(&status.reason),
            code => kind_of_status(code),
        },
        // Connection refused/reset, timeouts, TLS handshakes: the server may be back soon.
        kube::Error::HyperError(_) => ErrorKind::Unavailable,
        kube::Error::Service(source) => {
            if source.downcast_ref::<TokenError>().is_some() {
                ErrorKind::Unauthorized
            } else {
                ErrorKind::Unavailable
            }
        }
        kube::Error::Auth(_) => ErrorKind::Unauthorized,
        kube::Error::ReadEvents(_) => ErrorKind::Unavailable,
        kube::Error::BuildRequest(_) | kube::Error::HttpError(_) => ErrorKind::Invalid,
        _ => ErrorKind::Other,
    }
}

/// The kind of an HTTP status code from the API server.
pub fn kind_of_status(code: u16) -> ErrorKind {
    match code {
        429 => ErrorKind::Throttled,
        404 => ErrorKind::NotFound,
        // 410 Gone: an expired continue token or watch bookmark; start the read over.
        409 | 410 => ErrorKind::Conflict,
        401 | 403 => ErrorKind::Unauthorized,
        400 | 422 | 405 | 406 | 413 | 415 => ErrorKind::Invalid,
        408 | 500..=599 => ErrorKind::Unavailable,
        _ => ErrorKind::Other,
    }
}

/// The kind of a `Status.reason` (`metav1.StatusReason`), for a Status without a code.
fn kind_of_reason(reason: &str) -> ErrorKind {
    match reason {
        "TooManyRequests" => ErrorKind::Throttled,
        "NotFound" => ErrorKind::NotFound,
        "Conflict" | "AlreadyExists" | "Gone" | "Expired" => ErrorKind::Conflict,
        "Unauthorized" | "Forbidden" => ErrorKind::Unauthorized,
        "Invalid"
        | "BadRequest"
        | "MethodNotAllowed"
        | "NotAcceptable"
        | "UnsupportedMediaType"
        | "RequestEntityTooLarge" => ErrorKind::Invalid,
        "Timeout" | "ServerTimeout" | "ServiceUnavailable" | "InternalError" => {
            ErrorKind::Unavailable
        }
        _ => ErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        let mut status = kube::core::Status::failure("boom", reason);
        status.code = code;
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn status_codes_map_to_kinds() {
        let cases = [
            (429, ErrorKind::Throttled),
            (404, ErrorKind::NotFound),
            (409, ErrorKind::Conflict),
            (401, ErrorKind::Unauthorized),
            (403, ErrorKind::Unauthorized),
            (422, ErrorKind::Invalid),
            (400, ErrorKind::Invalid),
            (500, ErrorKind::Unavailable),
            (503, ErrorKind::Unavailable),
            (504, ErrorKind::Unavailable),
        ];
        for (code, kind) in cases {
            assert_eq!(classify(&api_error(code, "")), kind, "HTTP {code}");
        }
    }

    #[test]
    fn a_status_without_a_code_is_classified_by_its_reason() {
        assert_eq!(
            classify(&api_error(0, "TooManyRequests")),
            ErrorKind::Throttled
        );
        assert_eq!(
            classify(&api_error(0, "AlreadyExists")),
            ErrorKind::Conflict
        );
        assert_eq!(classify(&api_error(0, "Something")), ErrorKind::Other);
    }

    #[test]
    fn a_failed_token_provider_is_unauthorized() {
        let error = kube::Error::Service(Box::new(TokenError("no credentials".into())));
        assert_eq!(classify(&error), ErrorKind::Unauthorized);
    }

    #[test]
    fn the_kube_error_is_kept_as_the_source() {
        let error = cluster_error("listing nodes", api_error(429, "TooManyRequests"));
        assert_eq!(error.kind(), ErrorKind::Throttled);
        assert!(std::error::Error::source(&error).is_some());
    }
}

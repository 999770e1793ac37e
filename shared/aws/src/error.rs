//! Classifying SDK errors into the engine's [`ErrorKind`]s.
//!
//! Classification uses what the SDK gives as structure: the kind of `SdkError`
//! (timeout, dispatch failure, service error) and the service's error *code*
//! (`ConditionalCheckFailedException`, `RequestLimitExceeded`...). Never the message.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use nodewright_engine::ports::{CloudError, ErrorKind, StoreError};

/// The kind an AWS error code stands for, or `None` if the code says nothing we
/// can act on.
pub fn kind_for_code(code: &str) -> Option<ErrorKind> {
    let kind = match code {
        "ConditionalCheckFailedException" | "TransactionCanceledException" | "TransactionConflictException"
        | "IdempotentParameterMismatch" | "InvalidLaunchTemplateName.AlreadyExistsException"
        | "ResourceInUseException" => ErrorKind::Conflict,
        "ProvisionedThroughputExceededException" | "ThrottlingException" | "Throttling" | "RequestLimitExceeded"
        | "RequestThrottledException" | "TooManyRequestsException" | "LimitExceededException"
        | "ThrottledException" | "SlowDown" => ErrorKind::Throttled,
        "ResourceNotFoundException" | "ParameterNotFound" | "ParameterVersionNotFound" => ErrorKind::NotFound,
        "AccessDeniedException" | "AccessDenied" | "UnauthorizedOperation" | "UnrecognizedClientException"
        | "InvalidClientTokenId" | "ExpiredToken" | "ExpiredTokenException" | "AuthFailure"
        | "SignatureDoesNotMatch" | "MissingAuthenticationToken" | "InvalidSignatureException" => {
            ErrorKind::Unauthorized
        }
        "InsufficientInstanceCapacity" | "InsufficientCapacity" | "InsufficientHostCapacity"
        | "InsufficientReservedInstanceCapacity" | "MaxSpotInstanceCountExceeded" | "VcpuLimitExceeded"
        | "UnfulfillableCapacity" | "InsufficientFreeAddressesInSubnet" => ErrorKind::InsufficientCapacity,
        "ServiceUnavailable" | "ServiceUnavailableException" | "InternalServerError" | "InternalError"
        | "InternalFailure" | "Unavailable" => ErrorKind::Unavailable,
        "ValidationException" | "ValidationError" | "MissingParameter" | "InvalidParameter"
        | "InvalidParameterValue" | "InvalidParameterCombination" | "InvalidParameterException"
        | "SerializationException" | "UnsupportedOperation" => ErrorKind::Invalid,
        // EC2's "<Resource>.NotFound" family (InvalidInstanceID.NotFound, InvalidAMIID.NotFound...).
        c if c.ends_with(".NotFound") => ErrorKind::NotFound,
        c if c.ends_with(".Malformed") || c.starts_with("Invalid") => ErrorKind::Invalid,
        _ => return None,
    };
    Some(kind)
}

/// Classifies any SDK error.
pub fn classify<E, R>(err: &SdkError<E, R>) -> ErrorKind
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => ErrorKind::Unavailable,
        SdkError::ResponseError(_) => ErrorKind::Unavailable,
        SdkError::ConstructionFailure(_) => ErrorKind::Invalid,
        SdkError::ServiceError(service) => {
            service.err().code().and_then(kind_for_code).unwrap_or(ErrorKind::Other)
        }
        _ => ErrorKind::Other,
    }
}

/// The AWS error code and message, for people ("ValidationException: ...").
pub fn describe<E, R>(err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error,
    R: std::fmt::Debug,
{
    match err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            match (e.code(), e.message()) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.to_string(),
                _ => e.to_string(),
            }
        }
        other => DisplayErrorContext(other).to_string(),
    }
}

pub(crate) fn store_error<E, R>(what: impl AsRef<str>, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let kind = classify(&err);
    let message = format!("{}: {}", what.as_ref(), describe(&err));
    StoreError::with_source(kind, message, err)
}

pub(crate) fn cloud_error<E, R>(what: impl AsRef<str>, err: SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let kind = classify(&err);
    let message = format!("{}: {}", what.as_ref(), describe(&err));
    CloudError::with_source(kind, message, err)
}

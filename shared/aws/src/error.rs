//! Classifying SDK errors into the engine's [`ErrorKind`]s.
//!
//! Classification uses what the SDK gives as structure: the kind of `SdkError`
//! (timeout, dispatch failure, service error) and the service's error *code*
//! (`ConditionalCheckFailedException`, `RequestLimitExceeded`...). Never the message.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

#[cfg(any(feature = "ec2", feature = "lambda"))]
use nodewright_engine::ports::CloudError;
#[cfg(feature = "eks")]
use nodewright_engine::ports::ClusterError;
use nodewright_engine::ports::{BoxError, ErrorKind, StoreError};

/// The kind an AWS error code stands for, or `None` if the code says nothing we
/// can act on.
pub fn kind_for_code(code: &str) -> Option<ErrorKind> {
    let kind = match code {
        "ConditionalCheckFailedException"
        | "TransactionCanceledException"
        | "TransactionConflictException"
        | "IdempotentParameterMismatch"
        | "InvalidLaunchTemplateName.AlreadyExistsException"
        | "ResourceInUseException"
        // IAM: the entity exists / is in use / changed concurrently.
        | "EntityAlreadyExists"
        | "DeleteConflict"
        | "ConcurrentModification"
        // ARC: another zonal shift changed the resource.
        | "ConflictException" => ErrorKind::Conflict,
        "ProvisionedThroughputExceededException"
        | "ThrottlingException"
        | "Throttling"
        | "RequestLimitExceeded"
        | "RequestThrottledException"
        | "TooManyRequestsException"
        | "LimitExceededException"
        | "ThrottledException"
        | "SlowDown" => ErrorKind::Throttled,
        "ResourceNotFoundException"
        | "ParameterNotFound"
        | "ParameterVersionNotFound"
        // IAM (a role, an instance profile).
        | "NoSuchEntity" => ErrorKind::NotFound,
        "AccessDeniedException"
        | "AccessDenied"
        | "UnauthorizedOperation"
        | "UnrecognizedClientException"
        | "InvalidClientTokenId"
        | "ExpiredToken"
        | "ExpiredTokenException"
        | "AuthFailure"
        | "SignatureDoesNotMatch"
        | "MissingAuthenticationToken"
        | "InvalidSignatureException" => ErrorKind::Unauthorized,
        "InsufficientInstanceCapacity"
        | "InsufficientCapacity"
        | "InsufficientHostCapacity"
        | "InsufficientReservedInstanceCapacity"
        | "MaxSpotInstanceCountExceeded"
        | "VcpuLimitExceeded"
        | "UnfulfillableCapacity"
        | "InsufficientFreeAddressesInSubnet" => ErrorKind::InsufficientCapacity,
        "ServiceUnavailable"
        | "ServiceUnavailableException"
        | "InternalServerError"
        | "InternalError"
        | "InternalFailure"
        | "InternalServerException"
        | "Unavailable"
        // IAM: "the request processing has failed because of an unknown error", and an
        // entity being modified by IAM itself right now.
        | "ServiceFailure"
        | "EntityTemporarilyUnmodifiable" => ErrorKind::Unavailable,
        "ValidationException"
        | "ValidationError"
        | "MissingParameter"
        | "InvalidParameter"
        | "InvalidParameterValue"
        | "InvalidParameterCombination"
        | "InvalidParameterException"
        | "SerializationException"
        | "UnsupportedOperation" => ErrorKind::Invalid,
        // EC2's "<Resource>.NotFound" family (InvalidInstanceID.NotFound, InvalidAMIID.NotFound...).
        c if c.ends_with(".NotFound") => ErrorKind::NotFound,
        c if c.ends_with(".Malformed") || c.starts_with("Invalid") => ErrorKind::Invalid,
        _ => return None,
    };
    Some(kind)
}

/// Classifies any SDK error.
pub(crate) fn classify<E, R>(err: &SdkError<E, R>) -> ErrorKind
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => ErrorKind::Unavailable,
        SdkError::ResponseError(_) => ErrorKind::Unavailable,
        SdkError::ConstructionFailure(_) => ErrorKind::Invalid,
        SdkError::ServiceError(service) => service
            .err()
            .code()
            .and_then(kind_for_code)
            .unwrap_or(ErrorKind::Other),
        _ => ErrorKind::Other,
    }
}

/// The AWS error code and message, for people ("ValidationException: ...").
pub(crate) fn describe<E, R>(err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
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

/// The source a port error keeps: for a service error, the service's own error (its
/// code and message) rather than the `SdkError`, whose `Debug` carries the raw HTTP
/// response — every header — into any log that prints it.
fn source_of<E, R>(err: SdkError<E, R>) -> BoxError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match err {
        SdkError::ServiceError(service) => Box::new(service.into_err()),
        other => Box::new(other),
    }
}

pub(crate) fn store_error<E, R>(what: impl AsRef<str>, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let kind = classify(&err);
    let message = format!("{}: {}", what.as_ref(), describe(&err));
    StoreError::with_source(kind, message, source_of(err))
}

/// A DynamoDB error on `table`. DynamoDB answers `ResourceNotFoundException` only for
/// a table (or index) that does not exist or is not ACTIVE — a missing item is not an
/// error — so that kind is said in terms of the table and the setting that names it.
pub(crate) fn table_error<E, R>(
    table: &str,
    region: Option<&str>,
    what: impl AsRef<str>,
    err: SdkError<E, R>,
) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match classify(&err) {
        ErrorKind::NotFound => StoreError::with_source(
            ErrorKind::NotFound,
            format!(
                "DynamoDB table {table:?} does not exist in {} (NODEWRIGHT_TABLE_NAME); {}",
                region.unwrap_or("the configured region"),
                what.as_ref()
            ),
            source_of(err),
        ),
        _ => store_error(what, err),
    }
}

#[cfg(any(feature = "ec2", feature = "lambda"))]
pub(crate) fn cloud_error<E, R>(what: impl AsRef<str>, err: SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let kind = classify(&err);
    let message = format!("{}: {}", what.as_ref(), describe(&err));
    CloudError::with_source(kind, message, source_of(err))
}

/// An EKS error about `cluster`; "not found" names the cluster, its region and the
/// setting that names it.
#[cfg(feature = "eks")]
pub(crate) fn eks_error<E, R>(
    cluster: &str,
    region: Option<&str>,
    what: impl AsRef<str>,
    err: SdkError<E, R>,
) -> ClusterError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let kind = classify(&err);
    let message = match kind {
        ErrorKind::NotFound => format!(
            "EKS cluster {cluster:?} does not exist in {} (NODEWRIGHT_CLUSTER_NAME); {}",
            region.unwrap_or("the configured region"),
            what.as_ref()
        ),
        _ => format!("{}: {}", what.as_ref(), describe(&err)),
    };
    ClusterError::with_source(kind, message, source_of(err))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::config::http::HttpResponse;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
        ResourceNotFoundException,
    };
    use aws_smithy_types::body::SdkBody;

    fn response(status: u16) -> HttpResponse {
        HttpResponse::new(status.try_into().unwrap(), SdkBody::empty())
    }

    fn meta(code: &str) -> ErrorMetadata {
        ErrorMetadata::builder()
            .code(code)
            .message("the message is never matched")
            .build()
    }

    #[test]
    fn modeled_dynamodb_errors_classify_by_their_code() {
        let conflict = SdkError::service_error(
            PutItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(meta("ConditionalCheckFailedException"))
                    .build(),
            ),
            response(400),
        );
        assert_eq!(classify(&conflict), ErrorKind::Conflict);

        let throttled = SdkError::service_error(
            PutItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .meta(meta("ProvisionedThroughputExceededException"))
                    .build(),
            ),
            response(400),
        );
        assert_eq!(classify(&throttled), ErrorKind::Throttled);

        let missing = SdkError::service_error(
            PutItemError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .meta(meta("ResourceNotFoundException"))
                    .build(),
            ),
            response(400),
        );
        assert_eq!(classify(&missing), ErrorKind::NotFound);

        let unmodeled = SdkError::service_error(
            PutItemError::generic(meta("ThrottlingException")),
            response(400),
        );
        assert_eq!(classify(&unmodeled), ErrorKind::Throttled);
        let store = store_error("PutItem claim x", unmodeled);
        assert_eq!(store.kind, ErrorKind::Throttled);
        assert!(store.message.contains("ThrottlingException"));
        assert!(
            std::error::Error::source(&store).is_some(),
            "the SDK error is kept as the source"
        );
    }

    #[test]
    fn a_missing_table_is_named_with_its_region_and_setting_and_no_raw_http() {
        let mut raw = response(400);
        raw.headers_mut()
            .insert("x-amzn-requestid", "REQUEST-ID-HEADER");
        let missing = SdkError::service_error(
            PutItemError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .meta(meta("ResourceNotFoundException"))
                    .message("Requested resource not found")
                    .build(),
            ),
            raw,
        );
        let error = table_error("nw", Some("eu-west-1"), "PutItem claim a", missing);
        assert_eq!(error.kind, ErrorKind::NotFound);
        assert_eq!(
            error.to_string(),
            "store not found: DynamoDB table \"nw\" does not exist in eu-west-1 (NODEWRIGHT_TABLE_NAME); PutItem claim a"
        );
        assert!(
            !format!("{error:?}").contains("REQUEST-ID-HEADER"),
            "no raw HTTP response in the error: {error:?}"
        );
        let source = std::error::Error::source(&error).expect("the AWS error is kept");
        assert!(
            source.to_string().starts_with("ResourceNotFoundException"),
            "{source}"
        );

        let throttled = SdkError::service_error(
            PutItemError::generic(meta("ThrottlingException")),
            response(400),
        );
        let error = table_error("nw", Some("eu-west-1"), "PutItem claim a", throttled);
        assert_eq!(error.kind, ErrorKind::Throttled);
        assert!(
            error
                .message
                .starts_with("PutItem claim a: ThrottlingException")
        );
    }

    #[test]
    fn transport_failures_are_unavailable() {
        let timeout: SdkError<PutItemError, HttpResponse> = SdkError::timeout_error("slow");
        assert_eq!(classify(&timeout), ErrorKind::Unavailable);
    }

    #[test]
    fn modeled_iam_errors_classify_by_their_code_and_keep_their_source() {
        use aws_sdk_iam::operation::add_role_to_instance_profile::AddRoleToInstanceProfileError;
        use aws_sdk_iam::operation::create_instance_profile::CreateInstanceProfileError;
        use aws_sdk_iam::operation::get_instance_profile::GetInstanceProfileError;
        use aws_sdk_iam::types::error::{
            EntityAlreadyExistsException, NoSuchEntityException, ServiceFailureException,
        };

        let missing = SdkError::service_error(
            GetInstanceProfileError::NoSuchEntityException(
                NoSuchEntityException::builder()
                    .meta(meta("NoSuchEntity"))
                    .build(),
            ),
            response(404),
        );
        assert_eq!(classify(&missing), ErrorKind::NotFound);
        let exists = SdkError::service_error(
            CreateInstanceProfileError::EntityAlreadyExistsException(
                EntityAlreadyExistsException::builder()
                    .meta(meta("EntityAlreadyExists"))
                    .build(),
            ),
            response(409),
        );
        assert_eq!(classify(&exists), ErrorKind::Conflict);
        let failed = SdkError::service_error(
            AddRoleToInstanceProfileError::ServiceFailureException(
                ServiceFailureException::builder()
                    .meta(meta("ServiceFailure"))
                    .build(),
            ),
            response(500),
        );
        assert_eq!(classify(&failed), ErrorKind::Unavailable);
        for (code, kind) in [
            ("Throttling", ErrorKind::Throttled),
            ("AccessDenied", ErrorKind::Unauthorized),
        ] {
            let e = SdkError::service_error(
                GetInstanceProfileError::generic(meta(code)),
                response(400),
            );
            assert_eq!(classify(&e), kind, "{code}");
        }
        let err = cloud_error("GetInstanceProfile prod_1", missing);
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert!(err.message.contains("NoSuchEntity"), "{err}");
        assert!(
            std::error::Error::source(&err).is_some(),
            "the SDK error is kept as the source"
        );
    }

    #[test]
    fn ec2_codes_classify() {
        assert_eq!(
            kind_for_code("RequestLimitExceeded"),
            Some(ErrorKind::Throttled)
        );
        assert_eq!(
            kind_for_code("InvalidInstanceID.NotFound"),
            Some(ErrorKind::NotFound)
        );
        assert_eq!(
            kind_for_code("InvalidLaunchTemplateName.AlreadyExistsException"),
            Some(ErrorKind::Conflict)
        );
        assert_eq!(
            kind_for_code("InvalidParameterValue"),
            Some(ErrorKind::Invalid)
        );
        assert_eq!(
            kind_for_code("UnauthorizedOperation"),
            Some(ErrorKind::Unauthorized)
        );
        assert_eq!(
            kind_for_code("InsufficientInstanceCapacity"),
            Some(ErrorKind::InsufficientCapacity)
        );
        assert_eq!(kind_for_code("SomethingElse"), None);
    }
}

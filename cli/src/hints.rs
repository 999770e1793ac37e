//! A failure reading a deployed stack as one line that says what to set: no region,
//! credentials AWS refuses, a table that is not there, a kubeconfig that is missing or
//! that the cluster refuses. Decided by the kind the adapters classified (never by an
//! error's text); the innermost cause is quoted for the rest.

use std::path::Path;

use nodewright_engine::ports::{ClusterError, ErrorKind, StoreError};

use crate::failure::Failure;

/// What sets credentials, said once.
const CREDENTIALS: &str = "set AWS_PROFILE (after `aws sso login` if it uses SSO), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY";

/// No region in the environment, the profile or `--region`.
pub(crate) fn no_region() -> Failure {
    Failure::Unusable(
        "no AWS region: set AWS_REGION or --region (the region of the stack's table)".into(),
    )
}

/// The innermost cause of `error`, on one line.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = error;
    while let Some(next) = inner.source() {
        inner = next;
    }
    let text = inner.to_string();
    let line = text.lines().next().unwrap_or_default().trim();
    // A Debug dump after the words (`... (DispatchFailure(...`) tells people nothing.
    let line = line.split(" (").next().unwrap_or(line);
    // A list announced on the next lines (`no credentials found in chain. Attempted:`)
    // is left out with its announcement.
    let line = line.strip_suffix(" Attempted:").unwrap_or(line);
    line.trim_end_matches(['.', ':', ' ']).to_string()
}

/// Reading `table` in `region` failed doing `what`.
pub(crate) fn store(table: &str, region: &str, what: &str, e: &StoreError) -> Failure {
    let line = match e.kind {
        ErrorKind::NotFound => format!(
            "no DynamoDB table {table:?} in {region}: set --table to the stack's StateTableName output, and AWS_REGION or --region to the stack's region"
        ),
        ErrorKind::Unauthorized => format!(
            "AWS refused {what} in table {table:?} ({}): {CREDENTIALS}, for an identity allowed to read the table",
            root_cause(e)
        ),
        _ => format!(
            "cannot read table {table:?} in {region} ({what}): {}; check the network, and {CREDENTIALS}",
            root_cause(e)
        ),
    };
    Failure::Unusable(line)
}

/// Reading the depth of the dead-letter queue at `url` failed; the service's error
/// code decides (a queue that is not there), else the innermost cause is quoted.
pub(crate) fn dead_letter_queue<E, R>(url: &str, e: &aws_sdk_sqs::error::SdkError<E, R>) -> Failure
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    use aws_sdk_sqs::error::ProvideErrorMetadata as _;
    let code = e.code().unwrap_or_default();
    let line = match code {
        "AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist" => format!(
            "no SQS queue at {url}: set --dead-letter-queue-url to the URL of the stack's dead-letter queue (`aws sqs get-queue-url --queue-name NAME`), in its region"
        ),
        "AccessDenied"
        | "AccessDeniedException"
        | "InvalidClientTokenId"
        | "ExpiredToken"
        | "SignatureDoesNotMatch" => format!(
            "AWS refused GetQueueAttributes on {url} ({code}): {CREDENTIALS}, for an identity allowed to read the queue"
        ),
        _ => format!(
            "cannot read the dead-letter queue {url}: {}; check the network, and {CREDENTIALS}",
            e.message()
                .map(str::to_string)
                .unwrap_or_else(|| root_cause(e))
        ),
    };
    Failure::Unusable(line)
}

/// No kubeconfig at `path`.
pub(crate) fn no_kubeconfig(path: &Path) -> Failure {
    Failure::Unusable(format!(
        "no kubeconfig at {}: set KUBECONFIG or --kubeconfig (`aws eks update-kubeconfig --name CLUSTER` writes one)",
        path.display()
    ))
}

/// No `--kubeconfig`, no `KUBECONFIG` and no home directory to look in.
pub(crate) fn no_home() -> Failure {
    Failure::Unusable(
        "no kubeconfig: set KUBECONFIG or --kubeconfig (`aws eks update-kubeconfig --name CLUSTER` writes one)".into(),
    )
}

/// The cluster of the kubeconfig at `path` failed doing `what`.
pub(crate) fn cluster(path: &Path, what: &str, e: &ClusterError) -> Failure {
    let shown = path.display();
    let line = match e.kind {
        ErrorKind::Invalid => format!(
            "kubeconfig {shown} cannot be used ({}): set KUBECONFIG or --kubeconfig to a working one (`aws eks update-kubeconfig --name CLUSTER`)",
            root_cause(e)
        ),
        ErrorKind::Unauthorized => format!(
            "the cluster of kubeconfig {shown} refused {what} ({}): refresh its credentials (`aws eks update-kubeconfig --name CLUSTER`, with {CREDENTIALS}), and give your identity read access (an EKS access entry)",
            root_cause(e)
        ),
        ErrorKind::NotFound => format!(
            "the cluster of kubeconfig {shown} serves no such kind ({what}: {}): is it a Kubernetes 1.23 or later API server?",
            root_cause(e)
        ),
        _ => format!(
            "cannot reach the cluster of kubeconfig {shown} ({what}): {}; check its current context and the network",
            root_cause(e)
        ),
    };
    Failure::Unusable(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(f: Failure) -> String {
        match f {
            Failure::Unusable(line) => line,
            Failure::Invalid(lines) => lines.join("\n"),
        }
    }

    #[derive(Debug)]
    struct Dump;

    impl std::fmt::Display for Dump {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("dispatch failure: other: missing signing region (DispatchFailure(DispatchFailure { source: ConnectorError }))")
        }
    }

    impl std::error::Error for Dump {}

    #[test]
    fn a_store_failure_is_one_line_naming_what_to_set() {
        let missing = StoreError::new(ErrorKind::NotFound, "listing claims");
        let text = line(store("t", "eu-west-1", "listing claims", &missing));
        assert!(
            text.starts_with("no DynamoDB table \"t\" in eu-west-1: set --table"),
            "{text}"
        );
        let dump = StoreError::with_source(ErrorKind::Unavailable, "listing claims", Dump);
        let text = line(store("t", "us-east-1", "listing claims", &dump));
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains("DispatchFailure("), "{text}");
        assert!(text.contains("missing signing region"), "{text}");
        assert!(text.contains("AWS_PROFILE"), "{text}");
    }

    #[test]
    fn a_refused_kubeconfig_says_how_to_renew_it() {
        let refused = ClusterError::new(ErrorKind::Unauthorized, "listing nodes");
        let text = line(cluster(
            Path::new("/k"),
            "listing the cluster's objects",
            &refused,
        ));
        assert!(text.contains("aws eks update-kubeconfig"), "{text}");
        assert!(
            line(no_region()).starts_with("no AWS region: set AWS_REGION or --region"),
            "{}",
            line(no_region())
        );
    }

    #[test]
    fn a_kind_the_cluster_does_not_serve_is_named_not_blamed_on_the_network() {
        let missing = ClusterError::new(ErrorKind::NotFound, "listing horizontalpodautoscalers");
        let text = line(cluster(
            Path::new("/k"),
            "listing its horizontalpodautoscalers",
            &missing,
        ));
        assert!(
            text.starts_with("the cluster of kubeconfig /k serves no such kind (listing its horizontalpodautoscalers"),
            "{text}"
        );
        assert!(!text.contains("network"), "{text}");
    }
}

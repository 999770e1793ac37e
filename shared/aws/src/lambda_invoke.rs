//! Asking another Lambda function to run now: an asynchronous Invoke (InvocationType
//! `Event`), so the caller does not wait for it and Lambda retries it on its own.
//! Used by the interruption function to wake the provisioner right after evictions.

use aws_sdk_lambda::types::InvocationType;
use nodewright_engine::ports::{CloudError, ErrorKind};

use crate::AwsContext;
use crate::error::cloud_error;

/// Queues one asynchronous invocation of `function` (a name, ARN or partial ARN) with
/// an empty JSON payload. `Ok` means Lambda accepted the event (HTTP 202), not that the
/// function ran.
pub async fn invoke_async(ctx: &AwsContext, function: &str) -> Result<(), CloudError> {
    let out = ctx
        .lambda
        .invoke()
        .function_name(function)
        .invocation_type(InvocationType::Event)
        .payload(aws_sdk_lambda::primitives::Blob::new(b"{}".to_vec()))
        .send()
        .await
        .map_err(|e| cloud_error(format!("Invoke {function}"), e))?;
    match out.status_code() {
        202 => Ok(()),
        status => Err(CloudError::new(
            ErrorKind::Other,
            format!(
                "Invoke {function}: expected 202 Accepted for an asynchronous invocation, got {status}"
            ),
        )),
    }
}

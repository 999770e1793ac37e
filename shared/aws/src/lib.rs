//! nodewright's AWS adapters. Every AWS SDK type stays inside this crate; the rest
//! of nodewright sees the engine's ports and plain values.
//!
//! - [`config`]: [`AwsContext`], the SDK clients built once per cold start from the
//!   standard environment (`AWS_ENDPOINT_URL` points them at an emulator).
//! - [`store`]: [`DynamoStore`], the engine's `Store` over one DynamoDB table
//!   (claims, leases with fencing tokens, the ICE cache, idempotency keys, decisions).
//! - [`cloud`]: [`Ec2Cloud`], the engine's `Cloud` over EC2, SSM and IAM (CreateFleet
//!   over content-addressed launch templates, node class resolution, catalog, spot
//!   prices, the instances Karpenter launched).
//! - [`instance_profile`]: the instance profiles of EC2NodeClass roles, created or
//!   adopted as Karpenter does (IAM).
//! - [`eks`]: [`ClusterInfo`] from DescribeCluster and the IAM bearer token
//!   ([`TokenSource`]) for the Kubernetes API.
//! - [`ami`], [`userdata`], [`fleet`]: pure pieces (alias paths, nodeadm user data,
//!   CreateFleet error classification), tested without AWS.
//! - [`tags`]: the tags put on what nodewright creates.
//! - [`lambda_invoke`]: [`invoke_async`], waking another function (the provisioner) now.
//! - [`error`]: SDK errors → the engine's `ErrorKind`, by error code, never by message.

pub mod ami;
pub mod cloud;
pub mod config;
pub mod eks;
pub mod error;
pub mod fleet;
pub mod instance_profile;
pub mod lambda_invoke;
pub mod store;
pub mod tags;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod userdata;

pub use cloud::{Ec2Cloud, Ec2CloudConfig};
pub use config::AwsContext;
pub use eks::{ClusterInfo, TokenSource};
pub use lambda_invoke::invoke_async;
pub use store::DynamoStore;

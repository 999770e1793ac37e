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
//!
//! DynamoDB (the store) is always there; each other service is a feature, all on by
//! default: `ec2` (Ec2Cloud, user data, instance profiles: EC2, SSM, IAM), `eks`
//! (ClusterInfo, the token), `lambda` (invoke_async). The CLI reads a deployed stack's
//! table only, so it builds none of the others' SDK crates.

pub mod ami;
#[cfg(feature = "ec2")]
pub mod cloud;
pub mod config;
#[cfg(feature = "eks")]
pub mod eks;
pub mod error;
pub mod fleet;
#[cfg(feature = "ec2")]
pub mod instance_profile;
#[cfg(feature = "lambda")]
pub mod lambda_invoke;
pub mod store;
pub mod tags;
#[cfg(feature = "test-support")]
pub mod testing;
#[cfg(feature = "ec2")]
pub mod userdata;

#[cfg(feature = "ec2")]
pub use cloud::{Ec2Cloud, Ec2CloudConfig};
pub use config::AwsContext;
#[cfg(feature = "eks")]
pub use eks::{ClusterInfo, TokenSource};
#[cfg(feature = "lambda")]
pub use lambda_invoke::invoke_async;
pub use store::DynamoStore;

//! Instance profiles for EC2NodeClass roles, as Karpenter v1 manages them.
//!
//! An EC2NodeClass names either an `instanceProfile` (used as written, never created
//! nor changed) or a `role`. For a role, Karpenter creates an instance profile at run
//! time; the getting-started stack creates only the role. nodewright does the same, so
//! a class written for Karpenter launches unchanged:
//!
//! - one profile per EC2NodeClass, named as Karpenter names it
//!   ([`managed_instance_profile_name`]: `<cluster>_<FNV-1 of region + class name>`), so
//!   a profile Karpenter created for the class is found and adopted rather than
//!   duplicated;
//! - created with Karpenter's tags: the class's `tags`, `kubernetes.io/cluster/<cluster>:
//!   owned`, `eks:eks-cluster-name`, `karpenter.k8s.aws/ec2nodeclass` and
//!   `topology.kubernetes.io/region` (template.yaml allows creating a profile only with
//!   these, and changing one only when it carries them);
//! - holding the class's role: added when missing, and a different role is replaced
//!   (a profile holds at most one role) — but only in a profile tagged as this
//!   cluster's: an untagged profile that happens to have the name is used only if it
//!   already holds the role, never changed;
//! - remembered per warm Lambda, so a warm tick makes no IAM call.
//!
//! Karpenter v1.7 and later name a role's profile at random (`<cluster>_<hash of region,
//! class name and a UUID>`, under the path `/karpenter/<region>/<cluster>/<class uid>/`)
//! and record the name in the class's `status.instanceProfile`. Such a profile, tagged
//! as this cluster's and holding the class's role, is reused as it is (read, never
//! changed); otherwise the profile of the name above is made to hold the role, as
//! Karpenter makes a new one when the role changes.
//!
//! IAM is eventually consistent: EC2 may refuse a profile for a few seconds after it
//! was created. [`InstanceProfiles::recently_created`] lets the launch tell that
//! refusal from a real misconfiguration.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_iam::types::{InstanceProfile, Tag};

use nodewright_core::api::model::{Ec2NodeClass, managed_instance_profile_name};
use nodewright_core::well_known::LABEL_REGION;
use nodewright_engine::ports::{CloudError, ErrorKind};

use crate::error::{classify, cloud_error};
use crate::tags::{TAG_EKS_CLUSTER, TAG_NODECLASS, cluster_tag_key};

/// A profile known (in this process) to hold its role.
#[derive(Debug, Clone)]
struct HeldRole {
    role: String,
    /// When this process created it, if it did.
    created: Option<Instant>,
}

/// The instance profiles managed for EC2NodeClass roles of one cluster in one region.
pub struct InstanceProfiles {
    iam: aws_sdk_iam::Client,
    cluster: String,
    region: String,
    /// The profiles (by name) known in this process to hold their role.
    known: Mutex<HashMap<String, HeldRole>>,
}

impl InstanceProfiles {
    pub fn new(iam: aws_sdk_iam::Client, cluster: &str, region: &str) -> Self {
        Self {
            iam,
            cluster: cluster.to_string(),
            region: region.to_string(),
            known: Mutex::new(HashMap::new()),
        }
    }

    /// The name of the profile managed for `class` (whether or not it exists).
    pub fn name(&self, class: &Ec2NodeClass) -> String {
        managed_instance_profile_name(&self.cluster, &self.region, &class.name)
    }

    /// The tags a managed profile is created with (Karpenter's `InstanceProfileTags`).
    pub fn tags(&self, class: &Ec2NodeClass) -> BTreeMap<String, String> {
        let mut tags = class.tags.clone();
        tags.insert(cluster_tag_key(&self.cluster), "owned".into());
        tags.insert(TAG_EKS_CLUSTER.into(), self.cluster.clone());
        tags.insert(TAG_NODECLASS.into(), class.name.clone());
        tags.insert(LABEL_REGION.into(), self.region.clone());
        tags
    }

    /// Whether this process created the profile less than `window` ago.
    pub fn recently_created(&self, name: &str, window: Duration) -> bool {
        self.known
            .lock()
            .expect("instance profile cache lock")
            .get(name)
            .and_then(|r| r.created)
            .is_some_and(|at| at.elapsed() < window)
    }

    /// Makes sure the profile for `class` exists and holds `role` (reusing the one its
    /// status records, creating it, or adopting the one that exists), and returns its
    /// name.
    ///
    /// Errors: `NotFound` when the role does not exist; `Invalid` when a profile of that
    /// name exists, holds another role and is not tagged as this cluster's (it is not
    /// changed); the IAM error's own kind otherwise.
    pub async fn ensure(&self, class: &Ec2NodeClass, role: &str) -> Result<String, CloudError> {
        let name = self.name(class);
        let role = role_name_without_path(role).to_string();
        if let Some(recorded) = class
            .status_instance_profile
            .as_deref()
            .filter(|recorded| *recorded != name)
            && self.reusable(class, recorded, &role).await?
        {
            return Ok(recorded.to_string());
        }
        if self
            .known
            .lock()
            .expect("instance profile cache lock")
            .get(&name)
            .is_some_and(|r| r.role == role)
        {
            return Ok(name);
        }
        let mut created = None;
        let profile = match self.get(&name).await? {
            Some(p) => p,
            None => match self.create(&name, class).await {
                Ok(p) => {
                    created = Some(Instant::now());
                    tracing::info!(instance_profile = %name, node_class = %class.name, "created instance profile");
                    p
                }
                // Another invocation created it first: adopt theirs.
                Err(e) if e.kind == ErrorKind::Conflict => {
                    self.get(&name).await?.ok_or_else(|| {
                        CloudError::new(
                            ErrorKind::Unavailable,
                            format!("instance profile {name} exists but cannot be read yet"),
                        )
                    })?
                }
                Err(e) => return Err(e),
            },
        };
        let held = role_names(&profile);
        if held != [role.as_str()] {
            if created.is_none() && !self.owned(&profile) {
                return Err(CloudError::new(
                    ErrorKind::Invalid,
                    format!(
                        "EC2NodeClass {}: instance profile {name} exists, holds {held:?} rather than role {role}, and is not tagged {}=owned; nodewright does not change a profile it does not own",
                        class.name,
                        cluster_tag_key(&self.cluster)
                    ),
                ));
            }
            self.hold_only(&name, &held, &role).await?;
            tracing::info!(instance_profile = %name, role = %role, replaced = ?held, "instance profile holds the node class's role");
        } else if created.is_none() {
            tracing::info!(instance_profile = %name, role = %role, "adopted existing instance profile");
        }
        self.known
            .lock()
            .expect("instance profile cache lock")
            .insert(name.clone(), HeldRole { role, created });
        Ok(name)
    }

    /// Whether the profile the class's status records (Karpenter's, for a class it
    /// managed) can be launched with as it is: it exists, is tagged as this cluster's
    /// and holds `role`. A profile the stack's role may not read (a stack older than
    /// the permission) is not reused, with a warning: nodewright falls back to the
    /// profile it manages.
    async fn reusable(
        &self,
        class: &Ec2NodeClass,
        recorded: &str,
        role: &str,
    ) -> Result<bool, CloudError> {
        if self
            .known
            .lock()
            .expect("instance profile cache lock")
            .get(recorded)
            .is_some_and(|r| r.role == role)
        {
            return Ok(true);
        }
        let profile = match self.get(recorded).await {
            Ok(profile) => profile,
            Err(e) if e.kind == ErrorKind::Unauthorized => {
                tracing::warn!(instance_profile = %recorded, node_class = %class.name, error = %e,
                    "cannot read the instance profile the class's status records; using the one nodewright manages (update the stack for the permission)");
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let Some(profile) = profile else {
            return Ok(false);
        };
        if !self.owned(&profile) || role_names(&profile) != [role] {
            tracing::info!(instance_profile = %recorded, node_class = %class.name, role = %role, held = ?role_names(&profile),
                "the instance profile the class's status records is not this cluster's or holds another role; not reused");
            return Ok(false);
        }
        tracing::info!(instance_profile = %recorded, node_class = %class.name, role = %role,
            "reusing the instance profile the class's status records");
        self.known
            .lock()
            .expect("instance profile cache lock")
            .insert(
                recorded.to_string(),
                HeldRole {
                    role: role.to_string(),
                    created: None,
                },
            );
        Ok(true)
    }

    /// GetInstanceProfile; `None` when there is no such profile.
    async fn get(&self, name: &str) -> Result<Option<InstanceProfile>, CloudError> {
        match self
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(out) => Ok(out.instance_profile),
            Err(e) if classify(&e) == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(cloud_error(format!("GetInstanceProfile {name}"), e)),
        }
    }

    async fn create(
        &self,
        name: &str,
        class: &Ec2NodeClass,
    ) -> Result<InstanceProfile, CloudError> {
        let tags = self
            .tags(class)
            .into_iter()
            .map(|(k, v)| {
                Tag::builder().key(k).value(v).build().map_err(|e| {
                    CloudError::with_source(
                        ErrorKind::Invalid,
                        format!("instance profile {name}: tag"),
                        e,
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = self
            .iam
            .create_instance_profile()
            .instance_profile_name(name)
            .set_tags(Some(tags))
            .send()
            .await
            .map_err(|e| cloud_error(format!("CreateInstanceProfile {name}"), e))?;
        out.instance_profile.ok_or_else(|| {
            CloudError::new(
                ErrorKind::Other,
                format!("CreateInstanceProfile {name}: no profile in the answer"),
            )
        })
    }

    /// Tagged `kubernetes.io/cluster/<cluster>: owned`.
    fn owned(&self, profile: &InstanceProfile) -> bool {
        let key = cluster_tag_key(&self.cluster);
        profile
            .tags
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == key && t.value == "owned")
    }

    /// Removes every role in `held` but `role`, then adds `role` if it is missing.
    async fn hold_only(&self, name: &str, held: &[&str], role: &str) -> Result<(), CloudError> {
        for other in held.iter().filter(|r| **r != role) {
            match self
                .iam
                .remove_role_from_instance_profile()
                .instance_profile_name(name)
                .role_name(*other)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) if classify(&e) == ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(cloud_error(
                        format!("RemoveRoleFromInstanceProfile {name} {other}"),
                        e,
                    ));
                }
            }
        }
        if held.contains(&role) {
            return Ok(());
        }
        match self
            .iam
            .add_role_to_instance_profile()
            .instance_profile_name(name)
            .role_name(role)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if classify(&e) == ErrorKind::NotFound => Err(cloud_error(
                format!("AddRoleToInstanceProfile {name}: role {role} (does the role exist?)"),
                e,
            )),
            Err(e) => {
                // A concurrent invocation may have added it first (the profile is then
                // full): that is success.
                let now_held = self.get(name).await?;
                if now_held.as_ref().is_some_and(|p| role_names(p) == [role]) {
                    return Ok(());
                }
                Err(cloud_error(
                    format!("AddRoleToInstanceProfile {name} {role}"),
                    e,
                ))
            }
        }
    }
}

/// AddRoleToInstanceProfile takes a role's name without its path (`nodes/NodeRole` →
/// `NodeRole`), as Karpenter strips it.
fn role_name_without_path(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

fn role_names(profile: &InstanceProfile) -> Vec<&str> {
    profile.roles.iter().map(|r| r.role_name.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_paths_are_not_part_of_the_role_name() {
        assert_eq!(
            role_name_without_path("KarpenterNodeRole-prod"),
            "KarpenterNodeRole-prod"
        );
        assert_eq!(
            role_name_without_path("nodes/KarpenterNodeRole-prod"),
            "KarpenterNodeRole-prod"
        );
    }
}

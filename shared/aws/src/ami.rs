//! AMI alias → SSM parameter paths (pure), as Karpenter resolves them.

use nodewright_engine::ports::{CloudError, ErrorKind};

/// (Kubernetes arch, EC2/SSM arch) for every architecture nodewright launches.
pub const ARCHES: [(&str, &str); 2] = [("amd64", "x86_64"), ("arm64", "arm64")];

/// The SSM parameters (one per architecture) an `alias` term resolves to.
///
/// `prefix` is the public parameter namespace, normally `/aws/service` (configurable
/// because emulators cannot host parameters under `/aws`).
/// - `al2023@latest` → `<prefix>/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/standard/recommended/image_id`
/// - `al2023@v20250505` → `<prefix>/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/standard/amazon-eks-node-al2023-<arch>-standard-<k8s>-v20250505/image_id`
/// - `bottlerocket@latest` → `<prefix>/bottlerocket/aws-k8s-<k8s>/<arch>/latest/image_id`
/// - `bottlerocket@v1.20.0` → `<prefix>/bottlerocket/aws-k8s-<k8s>/<arch>/1.20.0/image_id`
pub fn alias_parameter_paths(
    prefix: &str,
    family: &str,
    version: &str,
    kubernetes_version: &str,
) -> Result<Vec<(&'static str, String)>, CloudError> {
    let prefix = prefix.trim_end_matches('/');
    let k8s = kubernetes_version;
    let paths = match family.to_ascii_lowercase().as_str() {
        "al2023" => ARCHES
            .iter()
            .map(|(kube_arch, arch)| {
                let name = if version == "latest" {
                    "recommended".to_string()
                } else {
                    format!("amazon-eks-node-al2023-{arch}-standard-{k8s}-{version}")
                };
                (*kube_arch, format!("{prefix}/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/standard/{name}/image_id"))
            })
            .collect(),
        "bottlerocket" => ARCHES
            .iter()
            .map(|(kube_arch, arch)| {
                let v = if version == "latest" { "latest" } else { version.trim_start_matches('v') };
                (*kube_arch, format!("{prefix}/bottlerocket/aws-k8s-{k8s}/{arch}/{v}/image_id"))
            })
            .collect(),
        other => {
            return Err(CloudError::new(
                ErrorKind::Invalid,
                format!("AMI alias family {other:?} is not supported (al2023, bottlerocket)"),
            ));
        }
    };
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn al2023_latest_resolves_to_the_recommended_public_parameters() {
        let paths = alias_parameter_paths("/aws/service", "al2023", "latest", "1.33").unwrap();
        assert_eq!(
            paths,
            vec![
                ("amd64", "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id".to_string()),
                ("arm64", "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/recommended/image_id".to_string()),
            ]
        );
    }

    #[test]
    fn al2023_pinned_version_resolves_to_the_versioned_parameter() {
        let paths = alias_parameter_paths("/aws/service", "AL2023", "v20250505", "1.32").unwrap();
        assert_eq!(
            paths[0].1,
            "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.32-v20250505/image_id"
        );
        assert_eq!(
            paths[1].1,
            "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-1.32-v20250505/image_id"
        );
    }

    #[test]
    fn bottlerocket_alias_resolves_to_the_bottlerocket_parameters() {
        let latest =
            alias_parameter_paths("/aws/service", "bottlerocket", "latest", "1.33").unwrap();
        assert_eq!(
            latest[0].1,
            "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/latest/image_id"
        );
        assert_eq!(
            latest[1].1,
            "/aws/service/bottlerocket/aws-k8s-1.33/arm64/latest/image_id"
        );
        let pinned =
            alias_parameter_paths("/aws/service", "bottlerocket", "v1.20.0", "1.33").unwrap();
        assert_eq!(
            pinned[0].1,
            "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/1.20.0/image_id"
        );
    }

    #[test]
    fn the_prefix_is_configurable_for_emulators() {
        let paths =
            alias_parameter_paths("/nodewright-test/aws/service/", "al2023", "latest", "1.33")
                .unwrap();
        assert_eq!(
            paths[0].1,
            "/nodewright-test/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
    }

    #[test]
    fn unknown_families_are_invalid() {
        let err =
            alias_parameter_paths("/aws/service", "windows2022", "latest", "1.33").unwrap_err();
        assert_eq!(err.kind, ErrorKind::Invalid);
    }
}

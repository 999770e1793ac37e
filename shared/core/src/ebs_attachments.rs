//! The EBS volumes an instance type attaches: EC2's per-type figures (the
//! `MaximumEbsAttachments` of DescribeInstanceTypes, and whether network interfaces and
//! instance store volumes share them), from `data/ebs-attachments.tsv`.

use std::collections::HashMap;
use std::sync::OnceLock;

/// EBS attachments per instance type where they differ from the Nitro default:
/// (attachments, shared with network interfaces and instance store).
fn table() -> &'static HashMap<&'static str, (i64, bool)> {
    static TABLE: OnceLock<HashMap<&'static str, (i64, bool)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        include_str!("../data/ebs-attachments.tsv")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let mut cols = l.split('\t');
                let name = cols.next().expect("a type");
                let count = cols
                    .next()
                    .and_then(|c| c.parse().ok())
                    .expect("a count: the table is checked by tests");
                let shared = cols.next() == Some("shared");
                (name, (count, shared))
            })
            .collect()
    })
}

/// The EBS volumes a new node of `instance_type` can attach for pods, as the EBS CSI
/// driver will publish it on a node launched from nodewright's launch template (the root
/// volume attached; on a shared-limit type, two network interfaces).
pub fn estimated_ebs_attachments(instance_type: &str) -> i64 {
    const NITRO_DEFAULT: (i64, bool) = (27, true);
    let (attachments, shared) = table().get(instance_type).copied().unwrap_or(NITRO_DEFAULT);
    let root = 1;
    let second_interface = i64::from(shared);
    (attachments - root - second_interface).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attachment_table_is_well_formed_and_names_each_type_once() {
        let mut seen = std::collections::HashSet::new();
        for line in include_str!("../data/ebs-attachments.tsv")
            .lines()
            .filter(|l| !l.starts_with('#'))
        {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), 3, "{line:?}");
            assert!(seen.insert(cols[0]), "{} twice", cols[0]);
            let count: i64 = cols[1].parse().expect(line);
            assert!((1..=128).contains(&count), "{line:?}");
            assert!(matches!(cols[2], "shared" | "dedicated"), "{line:?}");
        }
        assert_eq!(seen.len(), table().len());
    }
}

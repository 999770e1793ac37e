//! PodDisruptionBudgets: integers and percentages, and what is rejected.

use serde_json::json;

use super::*;
use crate::cluster::IntOrPercent;

#[test]
fn pdbs_take_integers_and_percentages() {
    let s = parse_snapshot(&list(vec![
        pdb_json("web", "minAvailable", json!("50%")),
        pdb_json("cache", "maxUnavailable", json!(1)),
    ]))
    .unwrap();
    assert_eq!(s.pdbs[0].min_available, Some(IntOrPercent::Percent(50)));
    assert_eq!(s.pdbs[0].max_unavailable, None);
    assert_eq!(s.pdbs[1].max_unavailable, Some(IntOrPercent::Int(1)));
    assert_eq!(
        (s.pdbs[1].namespace.as_str(), s.pdbs[1].name.as_str()),
        ("shop", "cache")
    );
    let sel = s.pdbs[1].selector.as_ref().unwrap();
    assert!(sel.matches(&[("app".to_string(), "cache".to_string())].into()));
}

#[test]
fn a_pdb_with_a_numeric_string_or_a_percentage_over_100_is_invalid() {
    for bad in [json!("3"), json!("150%"), json!("%"), json!(-1)] {
        let err =
            parse_snapshot(&list(vec![pdb_json("web", "minAvailable", bad.clone())])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("PodDisruptionBudget \"shop/web\": spec.minAvailable: "),
            "{bad}: {err}"
        );
    }
}

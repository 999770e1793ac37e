//! EC2NodeClass kubelet expressions (Karpenter-AWS v1.15's `NodeClassCEL`): a string
//! `spec.kubelet.maxPods`, or a `kubeReserved` / `systemReserved` value that is not a
//! quantity, is a CEL expression evaluated per instance type, so one class can size
//! every type of a family: `maxPods: "min(110, vcpus * 8)"`,
//! `kubeReserved: {cpu: "vcpus * 30", memory: "max_pods * 11 + 255"}`.
//!
//! The variables are the type's `vcpus`, `memory_mib`, `default_enis` (network
//! interfaces on its default network card), `ips_per_eni` (IPv4 addresses per
//! interface), `max_pods` and `instance_type`. In a `maxPods` expression `max_pods` is
//! the pods the type gets without it (ENI limit or 110, capped by `podsPerCore`); in a
//! reservation it is the pods the type gets with it. `min` and `max` take two numbers.
//!
//! An expression returns an int or a double (truncated toward zero). A reservation's
//! result is in the resource's natural unit and rounded as Karpenter rounds it: cpu in
//! millicores up to a multiple of 10, memory in MiB up to a multiple of 16,
//! ephemeral-storage in GiB, pid as a count. A reservation that fails or is negative is
//! dropped for that type (the default, if any, applies), as in Karpenter; a `maxPods`
//! that fails or falls outside [0, 2³¹−1] leaves the type no pods, so it is never
//! chosen (Karpenter refuses every type of the class instead).
//!
//! The ENI figures come from `data/eni-limits.tsv` (EC2's `NetworkInfo` for each
//! type); a type it does not list has 0 for both, as Karpenter gives a type without
//! network information.
//!
//! This module compiles and evaluates; `crate::density` resolves a class's settings for
//! each type (`resolved_kubelet`) and names the types an expression has no value on
//! (`expression_gaps`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::extractors::Arguments;
use cel::objects::Value;
use cel::{Context, ExecutionError, Program};

/// The variables an expression may read.
pub const VARIABLES: [&str; 6] = [
    "vcpus",
    "memory_mib",
    "default_enis",
    "ips_per_eni",
    "max_pods",
    "instance_type",
];

const MIB_MILLI: i64 = (1 << 20) * 1000;
const GIB_MILLI: i64 = (1 << 30) * 1000;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExpressionError {
    #[error("not a valid expression: {0}")]
    Syntax(String),
    /// Found evaluating on sample values: a type error, an unknown function, a result
    /// that is not a number.
    #[error("{0}")]
    Invalid(String),
    #[error("reads {name:?}, which is not a variable (expected one of {})", VARIABLES.join(", "))]
    UnknownVariable { name: String },
    #[error("failed on {instance_type}: {message}")]
    Evaluation {
        instance_type: String,
        message: String,
    },
    #[error("returned {got} on {instance_type}; it must return an int or a double")]
    NotANumber { instance_type: String, got: String },
    #[error("returned {value} on {instance_type}, outside [0, {}]", i32::MAX)]
    OutOfRange { instance_type: String, value: i64 },
    #[error("returned {value} on {instance_type}; a reservation cannot be negative")]
    Negative { instance_type: String, value: i64 },
}

/// One instance type's values for the variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vars {
    pub vcpus: i64,
    pub memory_mib: i64,
    pub default_enis: i64,
    pub ips_per_eni: i64,
    pub max_pods: i64,
    pub instance_type: String,
}

/// A compiled expression.
#[derive(Clone)]
pub struct Expression {
    text: String,
    program: Arc<Program>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expression").field(&self.text).finish()
    }
}

impl Expression {
    /// Compiles `text`, and checks that it reads only the known variables and returns
    /// a number (evaluated once on m5.large's values; a division by zero or overflow
    /// there is left for the real types to report).
    pub fn compile(text: &str) -> Result<Self, ExpressionError> {
        let program = Program::compile(text).map_err(|e| ExpressionError::Syntax(e.to_string()))?;
        if let Some(name) = program
            .references()
            .variables()
            .into_iter()
            .find(|v| !VARIABLES.contains(v))
        {
            return Err(ExpressionError::UnknownVariable { name: name.into() });
        }
        let expression = Self {
            text: text.into(),
            program: Arc::new(program),
        };
        let probe = Vars {
            vcpus: 2,
            memory_mib: 8192,
            default_enis: 3,
            ips_per_eni: 10,
            max_pods: 29,
            instance_type: "m5.large".into(),
        };
        match expression.evaluate(&probe) {
            Err(ExpressionError::Evaluation { .. }) if expression.probe_may_fail(&probe) => {}
            Err(ExpressionError::Evaluation { message, .. }) => {
                return Err(ExpressionError::Invalid(format!(
                    "cannot be evaluated: {message}"
                )));
            }
            Err(ExpressionError::NotANumber { got, .. }) => {
                return Err(ExpressionError::Invalid(format!(
                    "returns {got}; it must return an int or a double"
                )));
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        Ok(expression)
    }

    /// True when evaluating on `vars` failed on arithmetic (zero divisor, overflow, an
    /// infinite double),
    /// which depends on the type's values rather than on the expression's shape.
    fn probe_may_fail(&self, vars: &Vars) -> bool {
        match execute(&self.program, vars) {
            Ok(Value::Float(v)) => !v.is_finite(),
            Err(e) => matches!(
                e,
                ExecutionError::DivisionByZero(_)
                    | ExecutionError::RemainderByZero(_)
                    | ExecutionError::Overflow(..)
            ),
            Ok(_) => false,
        }
    }

    /// The expression's value on `vars`, a double truncated toward zero.
    pub fn evaluate(&self, vars: &Vars) -> Result<i64, ExpressionError> {
        let evaluation = |message: String| ExpressionError::Evaluation {
            instance_type: vars.instance_type.clone(),
            message,
        };
        match execute(&self.program, vars) {
            Ok(Value::Int(v)) => Ok(v),
            Ok(Value::Float(v)) if v.is_finite() => Ok(v as i64),
            Ok(Value::Float(v)) => Err(evaluation(format!("returned the non-finite {v}"))),
            Ok(other) => Err(ExpressionError::NotANumber {
                instance_type: vars.instance_type.clone(),
                got: format!("{other:?}"),
            }),
            Err(e) => Err(evaluation(e.to_string())),
        }
    }

    /// A `maxPods` expression's value on `vars`, which must fit the kubelet's int32.
    pub fn max_pods(&self, vars: &Vars) -> Result<i64, ExpressionError> {
        let value = self.evaluate(vars)?;
        if !(0..=i64::from(i32::MAX)).contains(&value) {
            return Err(ExpressionError::OutOfRange {
                instance_type: vars.instance_type.clone(),
                value,
            });
        }
        Ok(value)
    }
}

/// A reservation's result as the kubelet is given it (`"60m"`, `"96Mi"`, `"2Gi"`,
/// `"1000"`) and in milli-units; `None` when negative.
pub fn reserved(resource: &str, result: i64) -> Option<(String, i64)> {
    if result < 0 {
        return None;
    }
    Some(match resource {
        "cpu" => {
            let milli = round_up(result, 10);
            (format!("{milli}m"), milli)
        }
        "memory" => {
            let mib = round_up(result, 16);
            (format!("{mib}Mi"), mib.saturating_mul(MIB_MILLI))
        }
        "ephemeral-storage" => (format!("{result}Gi"), result.saturating_mul(GIB_MILLI)),
        _ => (result.to_string(), result.saturating_mul(1000)),
    })
}

fn round_up(value: i64, step: i64) -> i64 {
    match value % step {
        0 => value,
        rest => value.checked_add(step - rest).unwrap_or(value),
    }
}

/// Runs `program` on `vars`. The standard library and `min` / `max` are built once per
/// thread (building them costs more than evaluating); each run adds its variables in a
/// scope of its own.
fn execute(program: &Program, vars: &Vars) -> Result<Value, ExecutionError> {
    thread_local! {
        static ROOT: Context<'static, 'static> = root_context();
    }
    ROOT.with(|root| {
        let mut scope = root.new_inner_scope();
        for (name, value) in [
            ("vcpus", vars.vcpus),
            ("memory_mib", vars.memory_mib),
            ("default_enis", vars.default_enis),
            ("ips_per_eni", vars.ips_per_eni),
            ("max_pods", vars.max_pods),
        ] {
            scope.add_variable_from_value(name, Value::Int(value));
        }
        scope.add_variable_from_value(
            "instance_type",
            Value::String(Arc::new(vars.instance_type.clone())),
        );
        program.execute(&scope)
    })
}

/// Two-argument `min` and `max` over ints and doubles (an int beside a double is read
/// as a double), beside CEL's standard library.
fn root_context() -> Context<'static, 'static> {
    let mut context = Context::default();
    // Neither name is a standard overload, so the declarations cannot conflict.
    let _ = context.add_function("min", |Arguments(args): Arguments| {
        pick(&args, "min", f64::min)
    });
    let _ = context.add_function("max", |Arguments(args): Arguments| {
        pick(&args, "max", f64::max)
    });
    context
}

fn pick(args: &[Value], name: &str, choose: fn(f64, f64) -> f64) -> Result<Value, ExecutionError> {
    let [a, b] = args else {
        return Err(ExecutionError::function_error(
            name,
            format!("takes two numbers, got {} arguments", args.len()),
        ));
    };
    match (a.clone(), b.clone()) {
        (Value::Int(a), Value::Int(b)) => {
            Ok(Value::Int(if choose(a as f64, b as f64) == a as f64 {
                a
            } else {
                b
            }))
        }
        (Value::Int(a), Value::Float(b)) => Ok(Value::Float(choose(a as f64, b))),
        (Value::Float(a), Value::Int(b)) => Ok(Value::Float(choose(a, b as f64))),
        (Value::Float(a), Value::Float(b)) => Ok(Value::Float(choose(a, b))),
        (a, b) => Err(ExecutionError::function_error(
            name,
            format!("takes two numbers, got {a:?} and {b:?}"),
        )),
    }
}

/// `instance_type`'s (interfaces on the default network card, IPv4 addresses per
/// interface).
pub fn eni_limits(instance_type: &str) -> Option<(i64, i64)> {
    static TABLE: OnceLock<HashMap<&'static str, (i64, i64)>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            include_str!("../data/eni-limits.tsv")
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .filter_map(|l| {
                    let mut fields = l.split('\t');
                    let name = fields.next()?;
                    let enis = fields.next()?.parse().ok()?;
                    let ips = fields.next()?.parse().ok()?;
                    Some((name, (enis, ips)))
                })
                .collect()
        })
        .get(instance_type)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::resources::PODS;

    fn m5_large() -> Vars {
        crate::density::expression_vars(Catalog::embedded().get("m5.large").expect("m5.large"), 29)
    }

    #[test]
    fn karpenter_examples_evaluate_to_karpenters_figures_on_m5_large() {
        let vars = m5_large();
        assert_eq!(vars.vcpus, 2);
        assert_eq!(vars.memory_mib, 8192);
        assert_eq!((vars.default_enis, vars.ips_per_eni), (3, 10));
        let eval = |text: &str| Expression::compile(text).unwrap().evaluate(&vars).unwrap();
        assert_eq!(eval("min(110, vcpus * 8)"), 16);
        assert_eq!(eval("default_enis * (ips_per_eni - 1) + 2"), 29);
        assert_eq!(reserved("cpu", eval("vcpus * 30")).unwrap().0, "60m");
        assert_eq!(
            reserved("memory", eval("memory_mib / 100")).unwrap().0,
            "96Mi"
        );
        let with_16_pods = Vars {
            max_pods: 16,
            ..vars.clone()
        };
        let memory = Expression::compile("max_pods * 11").unwrap();
        assert_eq!(
            reserved("memory", memory.evaluate(&with_16_pods).unwrap()).unwrap(),
            ("176Mi".into(), 176 * MIB_MILLI)
        );
    }

    #[test]
    fn min_and_max_mix_ints_and_doubles_and_doubles_truncate() {
        let vars = m5_large();
        let eval = |text: &str| Expression::compile(text).unwrap().evaluate(&vars).unwrap();
        assert_eq!(eval("max(vcpus, 7)"), 7);
        assert_eq!(eval("min(2.9, vcpus)"), 2);
        assert_eq!(eval("max(double(vcpus) * 1.5, 1)"), 3);
        assert_eq!(
            eval("instance_type.startsWith('m5') ? 20 : 30"),
            20,
            "strings and conditionals are CEL's"
        );
    }

    #[test]
    fn compile_refuses_bad_syntax_unknown_variables_and_non_numbers() {
        assert!(matches!(
            Expression::compile("vcpus *"),
            Err(ExpressionError::Syntax(_))
        ));
        assert_eq!(
            Expression::compile("cores * 2").unwrap_err(),
            ExpressionError::UnknownVariable {
                name: "cores".into()
            }
        );
        assert_eq!(
            Expression::compile("instance_type")
                .unwrap_err()
                .to_string(),
            r#"returns String("m5.large"); it must return an int or a double"#
        );
        // CEL does not mix ints and doubles in arithmetic.
        assert!(matches!(
            Expression::compile("vcpus * 1.5"),
            Err(ExpressionError::Invalid(_))
        ));
        assert!(matches!(
            Expression::compile("min(1, 2, 3)"),
            Err(ExpressionError::Invalid(_))
        ));
        assert!(matches!(
            Expression::compile("floor(vcpus)"),
            Err(ExpressionError::Invalid(_))
        ));
    }

    #[test]
    fn a_zero_divisor_is_an_error_of_the_type_that_has_it_not_of_the_expression() {
        let expression = Expression::compile("vcpus / (ips_per_eni - 10)").unwrap();
        assert!(matches!(
            expression.evaluate(&m5_large()),
            Err(ExpressionError::Evaluation { instance_type, .. }) if instance_type == "m5.large"
        ));
        let other = Vars {
            ips_per_eni: 15,
            ..m5_large()
        };
        assert_eq!(expression.evaluate(&other), Ok(0));
    }

    #[test]
    fn max_pods_must_fit_the_kubelets_int32_and_non_finite_doubles_fail() {
        let vars = m5_large();
        let out_of_range = Expression::compile("vcpus - 3").unwrap().max_pods(&vars);
        assert_eq!(
            out_of_range,
            Err(ExpressionError::OutOfRange {
                instance_type: "m5.large".into(),
                value: -1
            })
        );
        assert!(
            Expression::compile("4294967296")
                .unwrap()
                .max_pods(&vars)
                .is_err()
        );
        assert!(matches!(
            Expression::compile("1.0 / 0.0").unwrap().evaluate(&vars),
            Err(ExpressionError::Evaluation { .. })
        ));
    }

    #[test]
    fn reservations_round_as_karpenter_and_negative_ones_are_dropped() {
        assert_eq!(reserved("cpu", 61), Some(("70m".into(), 70)));
        assert_eq!(reserved("cpu", 60), Some(("60m".into(), 60)));
        assert_eq!(reserved("memory", 0), Some(("0Mi".into(), 0)));
        assert_eq!(
            reserved("ephemeral-storage", 2),
            Some(("2Gi".into(), 2 * GIB_MILLI))
        );
        assert_eq!(reserved("pid", 1000), Some(("1000".into(), 1_000_000)));
        assert_eq!(reserved("memory", -1), None);
    }

    #[test]
    fn the_eni_table_gives_every_catalog_types_eni_limited_pods() {
        let catalog = Catalog::embedded();
        let mut listed = 0;
        for it in &catalog.types {
            let Some((enis, ips)) = eni_limits(&it.name) else {
                continue;
            };
            listed += 1;
            // The VPC CNI's pods: one address per interface is the node's own, plus
            // two host-network pods; the catalog's pods are exactly that.
            assert_eq!(
                enis * (ips - 1) + 2,
                it.allocatable.slot_milli(PODS) / 1000,
                "{}: {enis} interfaces of {ips} addresses",
                it.name
            );
        }
        assert!(
            listed + 10 >= catalog.types.len(),
            "the table lists {listed} of {} catalog types",
            catalog.types.len()
        );
    }
}

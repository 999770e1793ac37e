//! DynamoDB read and write units of one request, estimated from the request and
//! response JSON the proxy saw, with DynamoDB's sizing rules
//! (developer guide, "Item sizes and formats" and "Read/write capacity mode"):
//!
//! - an item's size is the sum of its attribute names and values: a string is its
//!   UTF-8 length, a number about one byte per two significant digits plus one, binary
//!   its decoded length, a boolean or null 1 byte, a list or map 3 bytes plus one byte
//!   and the size of each element (and, for a map, each key);
//! - reads: 1 unit per 4 KB of the items a request returns (rounded up per request,
//!   at least 1), half that when eventually consistent (GSI queries always are);
//! - writes: 1 unit per 1 KB of the item written (rounded up per item, at least 1);
//! - transactions count twice.
//!
//! Estimates, not DynamoDB's own figures: a Query is charged for the items it read
//! before any filter, an update for the larger of the item before and after, a
//! delete for the item deleted; the proxy sees only what the request and response
//! carry (the item after an update only when the caller asked for it back).

use serde_json::Value;

const READ_UNIT_BYTES: f64 = 4096.0;
const WRITE_UNIT_BYTES: f64 = 1024.0;

/// Units one request consumed (0.5 steps for eventually consistent reads).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Units {
    pub read: f64,
    pub write: f64,
}

/// The units of `operation` (the `X-Amz-Target` suffix: `Query`, `PutItem`...), given
/// its request body and, when it succeeded, its response body. A failed conditional
/// write still consumes its write units, as on DynamoDB.
pub fn estimate(operation: &str, request: &Value, response: Option<&Value>) -> Units {
    let response_item_bytes = |field: &str| {
        response
            .and_then(|r| r.get(field))
            .map(item_size)
            .unwrap_or(0)
    };
    match operation {
        "GetItem" => Units {
            read: read_units(response_item_bytes("Item"), consistent(request)),
            write: 0.0,
        },
        "Query" | "Scan" => {
            let bytes = response
                .and_then(|r| r.get("Items"))
                .and_then(Value::as_array)
                .map_or(0, |items| items.iter().map(item_size).sum());
            let consistent = consistent(request) && request.get("IndexName").is_none();
            Units {
                read: read_units(bytes, consistent),
                write: 0.0,
            }
        }
        "PutItem" => Units {
            read: 0.0,
            write: write_units(request.get("Item").map_or(0, item_size)),
        },
        "UpdateItem" => {
            // The item after the update when it came back (ReturnValues ALL_NEW),
            // else what the request names: its key and the values it sets.
            let named = request.get("Key").map_or(0, item_size)
                + request
                    .get("ExpressionAttributeValues")
                    .map_or(0, item_size);
            Units {
                read: 0.0,
                write: write_units(named.max(response_item_bytes("Attributes"))),
            }
        }
        "DeleteItem" => Units {
            read: 0.0,
            write: write_units(response_item_bytes("Attributes")),
        },
        "BatchGetItem" => {
            let bytes = response
                .and_then(|r| r.get("Responses"))
                .and_then(Value::as_object)
                .map_or(0, |tables| {
                    tables
                        .values()
                        .filter_map(Value::as_array)
                        .flatten()
                        .map(item_size)
                        .sum()
                });
            Units {
                read: read_units(bytes, false),
                write: 0.0,
            }
        }
        "BatchWriteItem" => Units {
            read: 0.0,
            write: batch_writes(request.get("RequestItems")),
        },
        "TransactWriteItems" => {
            let write: f64 = request
                .get("TransactItems")
                .and_then(Value::as_array)
                .map_or(0.0, |items| {
                    items
                        .iter()
                        .map(|i| match i.get("Put").and_then(|p| p.get("Item")) {
                            Some(item) => write_units(item_size(item)),
                            None => 1.0,
                        })
                        .sum()
                });
            Units {
                read: 0.0,
                write: 2.0 * write,
            }
        }
        "TransactGetItems" => {
            let read: f64 = response
                .and_then(|r| r.get("Responses"))
                .and_then(Value::as_array)
                .map_or(0.0, |items| {
                    items
                        .iter()
                        .map(|i| read_units(i.get("Item").map_or(0, item_size), true))
                        .sum()
                });
            Units {
                read: 2.0 * read,
                write: 0.0,
            }
        }
        // DescribeTable and the like are control-plane calls: no capacity.
        _ => Units::default(),
    }
}

fn consistent(request: &Value) -> bool {
    request
        .get("ConsistentRead")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = (bytes as f64 / READ_UNIT_BYTES).ceil().max(1.0);
    if consistent { units } else { units / 2.0 }
}

fn write_units(bytes: usize) -> f64 {
    (bytes as f64 / WRITE_UNIT_BYTES).ceil().max(1.0)
}

fn batch_writes(request_items: Option<&Value>) -> f64 {
    let Some(tables) = request_items.and_then(Value::as_object) else {
        return 0.0;
    };
    tables
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .map(|w| match w.get("PutRequest").and_then(|p| p.get("Item")) {
            Some(item) => write_units(item_size(item)),
            None => 1.0,
        })
        .sum()
}

/// The size of an item (a JSON object of attribute name → typed value) in bytes.
pub fn item_size(item: &Value) -> usize {
    item.as_object().map_or(0, |attributes| {
        attributes
            .iter()
            .map(|(name, value)| name.len() + value_size(value))
            .sum()
    })
}

/// The size of one typed value (`{"S": "..."}`, `{"M": {...}}`...).
fn value_size(value: &Value) -> usize {
    let Some((kind, inner)) = value.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, str::len),
        "N" => inner.as_str().map_or(0, number_size),
        "B" => inner.as_str().map_or(0, base64_decoded_len),
        "BOOL" | "NULL" => 1,
        "SS" => strings(inner).iter().map(String::len).sum(),
        "NS" => strings(inner).iter().map(|n| number_size(n)).sum(),
        "BS" => strings(inner).iter().map(|b| base64_decoded_len(b)).sum(),
        "L" => {
            3 + inner
                .as_array()
                .map_or(0, |l| l.iter().map(|e| 1 + value_size(e)).sum())
        }
        "M" => {
            3 + inner.as_object().map_or(0, |m| {
                m.iter()
                    .map(|(k, e)| 1 + k.len() + value_size(e))
                    .sum::<usize>()
            })
        }
        _ => 0,
    }
}

/// One byte per two significant digits, plus one.
fn number_size(n: &str) -> usize {
    let digits: String = n
        .trim_start_matches('-')
        .split(['e', 'E'])
        .next()
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.div_ceil(2) + 1
}

fn base64_decoded_len(s: &str) -> usize {
    let padding = s.bytes().rev().take_while(|b| *b == b'=').count();
    (s.len() / 4 * 3).saturating_sub(padding)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn item_sizes_follow_dynamodbs_rules() {
        // "pk" (2) + "CLAIMS" (6); "version" (7) + 12 → 2 digits → 2 bytes.
        assert_eq!(
            item_size(&json!({"pk": {"S": "CLAIMS"}, "version": {"N": "12"}})),
            8 + 9
        );
        assert_eq!(number_size("1000"), 2, "trailing zeros are not significant");
        assert_eq!(number_size("-123.45"), 4);
        assert_eq!(item_size(&json!({"ok": {"BOOL": true}})), 3);
        // "l" + 3 + (1 + 1) + (1 + 1 digit → 2)
        assert_eq!(
            item_size(&json!({"l": {"L": [{"S": "a"}, {"N": "5"}]}})),
            1 + 3 + 2 + 3
        );
        // "m" + 3 + (1 + "k" + "v")
        assert_eq!(
            item_size(&json!({"m": {"M": {"k": {"S": "v"}}}})),
            1 + 3 + 3
        );
        assert_eq!(base64_decoded_len("aGk="), 2);
    }

    #[test]
    fn reads_are_rounded_up_per_request_and_halved_when_eventually_consistent() {
        let big = "x".repeat(5000);
        let item = json!({"pk": {"S": big}});
        let consistent = json!({"ConsistentRead": true});
        let response = json!({"Items": [item.clone(), item.clone()]});
        // 2 × 5,002 bytes = 10,004 → 3 × 4 KB.
        assert_eq!(estimate("Query", &consistent, Some(&response)).read, 3.0);
        assert_eq!(estimate("Query", &json!({}), Some(&response)).read, 1.5);
        let on_index = json!({"ConsistentRead": true, "IndexName": "byInstance"});
        assert_eq!(estimate("Query", &on_index, Some(&response)).read, 1.5);
        assert_eq!(
            estimate("GetItem", &consistent, Some(&json!({}))).read,
            1.0,
            "an item not found still costs a read"
        );
    }

    #[test]
    fn writes_are_per_kilobyte_and_transactions_count_twice() {
        let item = json!({"pk": {"S": "x".repeat(1500)}});
        assert_eq!(
            estimate("PutItem", &json!({"Item": item.clone()}), None).write,
            2.0
        );
        let transact = json!({"TransactItems": [{"Put": {"Item": item}}, {"Delete": {}}]});
        assert_eq!(estimate("TransactWriteItems", &transact, None).write, 6.0);
        let update = json!({"Key": {"pk": {"S": "LEASE#p"}}, "ExpressionAttributeValues": {":one": {"N": "1"}}});
        let after = json!({"Attributes": {"pk": {"S": "y".repeat(2000)}}});
        assert_eq!(estimate("UpdateItem", &update, None).write, 1.0);
        assert_eq!(estimate("UpdateItem", &update, Some(&after)).write, 2.0);
        assert_eq!(
            estimate("DescribeTable", &json!({}), None),
            Units::default()
        );
    }
}

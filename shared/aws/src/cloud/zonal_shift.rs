//! ARC GetManagedResource for the cluster: the zonal shifts and autoshifts in force.
//!
//! Read only when the stack opts in (`Ec2CloudConfig::zonal_shift`). The provisioner
//! gathers every few seconds; ARC is asked at most once per
//! [`Ec2CloudConfig::zonal_shift_ttl`] (30 s, as often as Karpenter-AWS polls it). When
//! a read fails, the last answer is kept for up to [`STALE_LIMIT`]: a zone does not
//! come back into use because ARC could not be reached during an outage.

use std::time::{Duration, Instant};

use aws_sdk_arczonalshift::types::{AppliedStatus, AutoshiftAppliedStatus};
use tracing::warn;

use nodewright_engine::ports::{CloudError, ErrorKind, ZonalShift};

use super::Ec2Cloud;
use crate::error::cloud_error;

/// How long a failed read leaves the last answer in force.
pub const STALE_LIMIT: Duration = Duration::from_secs(10 * 60);

/// The last answer ARC gave, and when.
#[derive(Debug, Default)]
pub(super) struct LastRead {
    read: Option<(Instant, Vec<ZonalShift>)>,
}

impl Ec2Cloud {
    pub(super) async fn read_zonal_shifts(&self) -> Result<Vec<ZonalShift>, CloudError> {
        if !self.config.zonal_shift {
            return Ok(Vec::new());
        }
        let cached = {
            let last = self.zonal_shifts.lock().unwrap_or_else(|p| p.into_inner());
            last.read.clone()
        };
        if let Some((at, shifts)) = &cached
            && at.elapsed() < self.config.zonal_shift_ttl
        {
            return Ok(shifts.clone());
        }
        match self.get_managed_resource().await {
            Ok(shifts) => {
                self.zonal_shifts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .read = Some((Instant::now(), shifts.clone()));
                Ok(shifts)
            }
            Err(e) => match cached {
                Some((at, shifts)) if at.elapsed() < STALE_LIMIT => {
                    warn!(error = %e, kind = ?e.kind, age_s = at.elapsed().as_secs(),
                        "could not read the cluster's zonal shifts; keeping the last answer");
                    Ok(shifts)
                }
                _ => Err(e),
            },
        }
    }

    async fn get_managed_resource(&self) -> Result<Vec<ZonalShift>, CloudError> {
        let arn = self.cluster.arn.as_deref().ok_or_else(|| {
            CloudError::new(
                ErrorKind::Invalid,
                format!(
                    "cluster {}: DescribeCluster gave no ARN to read zonal shifts with",
                    self.cluster.name
                ),
            )
        })?;
        let out = self
            .arc
            .get_managed_resource()
            .resource_identifier(arn)
            .send()
            .await
            .map_err(|e| cloud_error(format!("GetManagedResource {arn}"), e))?;
        let mut shifts: Vec<ZonalShift> = out
            .zonal_shifts
            .into_iter()
            .map(|z| ZonalShift {
                zone_id: z.away_from,
                applied: z.applied_status == AppliedStatus::Applied,
                expires: Some(z.expiry_time.secs()),
                kind: z
                    .shift_type
                    .map_or_else(|| "ZONAL_SHIFT".into(), |t| t.as_str().to_string()),
            })
            .collect();
        // Autoshifts ARC starts on its own: in force while applied, no end of their own.
        shifts.extend(
            out.autoshifts
                .unwrap_or_default()
                .into_iter()
                .map(|a| ZonalShift {
                    zone_id: a.away_from,
                    applied: a.applied_status == AutoshiftAppliedStatus::Applied,
                    expires: None,
                    kind: "ZONAL_AUTOSHIFT".into(),
                }),
        );
        Ok(shifts)
    }
}

#[cfg(test)]
mod tests {
    //! Against a stand-in for ARC's HTTP API (moto has no arc-zonal-shift): the real
    //! SDK client signs and sends GetManagedResource to it, and parses what it answers
    //! as ARC answers (restJson1, epoch-second timestamps, `x-amzn-ErrorType`).

    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::config::AwsContext;
    use crate::eks::ClusterInfo;
    use crate::{Ec2Cloud, Ec2CloudConfig};

    const ARN: &str = "arn:aws:eks:us-east-1:123456789012:cluster/prod";

    /// Serves `answers` (status, extra header, body) in order, one per request, and
    /// records each request line.
    fn arc(answers: Vec<(u16, &'static str, String)>) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            let mut answers = answers.into_iter();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let mut length = 0;
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        if header.trim().is_empty() {
                            break;
                        }
                        if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:")
                        {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    log.lock().unwrap().push(line.trim().to_string());
                    let Some((status, header, body)) = answers.next() else {
                        return;
                    };
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{header}content-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    stream.write_all(reply.as_bytes()).unwrap();
                }
            }
        });
        (url, seen)
    }

    async fn cloud(url: &str, zonal_shift: bool, arn: Option<&str>) -> Ec2Cloud {
        let config = Ec2CloudConfig {
            zonal_shift,
            // Every call asks ARC (the cache is tested apart).
            zonal_shift_ttl: Duration::ZERO,
            ..Ec2CloudConfig::default()
        };
        let cluster = ClusterInfo {
            arn: arn.map(String::from),
            name: "prod".into(),
            endpoint: "https://example.eks.amazonaws.com".into(),
            ca_pem: vec![],
            version: "1.33".into(),
            service_cidr: None,
        };
        Ec2Cloud::new(
            &AwsContext::for_emulator(url, "us-east-1").await,
            config,
            cluster,
        )
    }

    fn managed_resource() -> String {
        serde_json::json!({
            "arn": ARN,
            "name": "prod",
            "appliedWeights": {},
            "zonalShifts": [
                {"appliedStatus": "APPLIED", "zonalShiftId": "91ad1e0a", "resourceIdentifier": ARN,
                 "awayFrom": "use1-az1", "expiryTime": 1_900_000_000, "startTime": 1_899_990_000,
                 "comment": "az1 impaired", "shiftType": "ZONAL_SHIFT"},
                {"appliedStatus": "NOT_APPLIED", "zonalShiftId": "0f3a", "resourceIdentifier": ARN,
                 "awayFrom": "use1-az2", "expiryTime": 1_900_000_000, "startTime": 1_899_990_000,
                 "comment": "practice", "shiftType": "PRACTICE_RUN"}
            ],
            "autoshifts": [{"appliedStatus": "APPLIED", "awayFrom": "use1-az6", "startTime": 1_899_990_000}]
        })
        .to_string()
    }

    #[tokio::test]
    async fn the_clusters_shifts_and_autoshifts_are_read_with_its_arn() {
        let (url, seen) = arc(vec![(200, "", managed_resource())]);
        let shifts = cloud(&url, true, Some(ARN))
            .await
            .read_zonal_shifts()
            .await
            .unwrap();
        assert_eq!(
            shifts,
            vec![
                ZonalShift {
                    zone_id: "use1-az1".into(),
                    applied: true,
                    expires: Some(1_900_000_000),
                    kind: "ZONAL_SHIFT".into()
                },
                ZonalShift {
                    zone_id: "use1-az2".into(),
                    applied: false,
                    expires: Some(1_900_000_000),
                    kind: "PRACTICE_RUN".into()
                },
                ZonalShift {
                    zone_id: "use1-az6".into(),
                    applied: true,
                    expires: None,
                    kind: "ZONAL_AUTOSHIFT".into()
                },
            ]
        );
        let requests = seen.lock().unwrap().clone();
        assert_eq!(requests.len(), 1);
        assert!(
            requests[0].starts_with(
                "GET /managedresources/arn%3Aaws%3Aeks%3Aus-east-1%3A123456789012%3Acluster%2Fprod"
            ),
            "{requests:?}"
        );
    }

    #[tokio::test]
    async fn nothing_is_asked_of_arc_unless_the_stack_opts_in() {
        let (url, seen) = arc(vec![(200, "", managed_resource())]);
        let shifts = cloud(&url, false, Some(ARN))
            .await
            .read_zonal_shifts()
            .await
            .unwrap();
        assert_eq!(shifts, vec![]);
        assert!(seen.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_failed_read_keeps_the_last_answer_and_without_one_is_classified() {
        let throttled = (
            400,
            "x-amzn-ErrorType: ThrottlingException\r\n",
            r#"{"message":"Rate exceeded"}"#.to_string(),
        );
        // The SDK retries a throttled call (three attempts in all).
        let (url, _) = arc(std::iter::once((200, "", managed_resource()))
            .chain(std::iter::repeat_n(throttled.clone(), 3))
            .collect());
        let cloud_ = cloud(&url, true, Some(ARN)).await;
        let first = cloud_.read_zonal_shifts().await.unwrap();
        assert_eq!(cloud_.read_zonal_shifts().await.unwrap(), first);

        let (url, _) = arc(std::iter::repeat_n(throttled, 3).collect());
        let e = cloud(&url, true, Some(ARN))
            .await
            .read_zonal_shifts()
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Throttled, "{e}");
        assert!(e.to_string().contains("GetManagedResource"), "{e}");
    }

    #[tokio::test]
    async fn a_cluster_without_an_arn_is_named() {
        let (url, seen) = arc(vec![]);
        let e = cloud(&url, true, None)
            .await
            .read_zonal_shifts()
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(e.to_string().contains("cluster prod"), "{e}");
        assert!(seen.lock().unwrap().is_empty());
    }
}

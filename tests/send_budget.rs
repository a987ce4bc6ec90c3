//! The daemon-wide ztp/1 send budget (`quic.send_budget_bytes`): with the
//! smallest budget (one 4 MiB read chunk for every connection together),
//! eight clients fetching a 24 MiB model at once over ztp/1 all get every
//! component, verified; the budget never holds more than it allows, and
//! is all given back once the clients are done.

mod common;

use std::time::Duration;

use common::quic::metric;
use common::{eventually, layered_model, Server};
use zt_client::trust::Trust;
use zt_client::{Client, Options, Verification};

const MIB: u64 = 1 << 20;
const LAYERS: u32 = 24;

#[test]
fn many_clients_share_a_small_send_budget() {
    let root = tempfile::tempdir().unwrap();
    layered_model(&root.path().join("m.zt"), 0..LAYERS);
    let cfg = common::config_file(root.path(), "[quic]\nsend_budget_bytes = 4194304\n");
    let s = Server::start_quic(root.path(), &["--config", &cfg]);
    let (q, fp) = s.quic.clone().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = format!("quic://{q}/m.zt");
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (url, fp) = (url.clone(), fp.clone());
            rt.spawn(async move {
                let options = Options {
                    trust: Trust::fingerprint(&fp).unwrap(),
                    require_digest: true,
                    ..Options::default()
                };
                let client = Client::connect(&url, options).await.unwrap();
                let mut f = client.fetch(&[], None).await.unwrap();
                let mut n = 0;
                while let Some(d) = f.next().await {
                    let d = d.unwrap();
                    assert_eq!(d.data.len() as u64, MIB);
                    assert_eq!(d.verification, Verification::Verified);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut most = 0;
    let done = rt.block_on(async {
        let mut counts = Vec::new();
        for c in clients {
            while !c.is_finished() {
                most = most.max(metric(&s, "ztserve_quic_send_budget_held_bytes"));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            counts.push(c.await.unwrap());
        }
        counts
    });
    assert_eq!(done, vec![LAYERS; 8], "every client got every component");
    assert!(most <= 4 * MIB, "the budget held {most} bytes, over 4 MiB");
    assert!(
        eventually(Duration::from_secs(10), || {
            metric(&s, "ztserve_quic_send_budget_held_bytes") == 0
        }),
        "the budget is all given back"
    );
}

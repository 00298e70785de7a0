//! What ships in `deploy/`: no usable API key, no port open beyond the host.

use std::path::PathBuf;

fn deploy_file(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

#[test]
fn the_compose_file_has_no_default_key_and_publishes_on_loopback_only() {
    let compose = deploy_file("compose.yaml");
    let keys = compose
        .lines()
        .find(|l| l.trim_start().starts_with("AGENTENKIT_API_KEYS:"))
        .expect("the compose file passes AGENTENKIT_API_KEYS on");
    assert!(
        keys.contains("${AGENTENKIT_API_KEYS:?"),
        "AGENTENKIT_API_KEYS must be required, not defaulted: {keys}"
    );
    let mut in_ports = false;
    let mut published = 0;
    for line in compose.lines() {
        let trimmed = line.trim();
        if trimmed == "ports:" {
            in_ports = true;
            continue;
        }
        if in_ports && trimmed.starts_with("- ") {
            published += 1;
            let mapping = trimmed.trim_start_matches("- ").trim_matches('"');
            assert!(
                mapping.starts_with("127.0.0.1:"),
                "port {mapping} is published on every interface"
            );
        } else {
            in_ports = false;
        }
    }
    assert!(published > 0, "the API is published");
}

#[test]
fn no_kubernetes_manifest_ships_an_api_key() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/k8s");
    for entry in std::fs::read_dir(&dir).expect("deploy/k8s") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("manifest");
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            assert!(
                !line.contains("AGENTENKIT_API_KEYS:"),
                "{} sets AGENTENKIT_API_KEYS: {line}",
                path.display()
            );
            assert!(
                !line.contains("kind: Secret"),
                "{} ships a Secret",
                path.display()
            );
        }
    }
}

#[test]
fn the_reaper_cronjob_forbids_overlaps_and_keda_scales_on_the_segments_queue() {
    let cronjob = deploy_file("k8s/reaper-cronjob.yaml");
    assert!(cronjob.contains("concurrencyPolicy: Forbid"), "{cronjob}");
    let keda = deploy_file("k8s/keda.yaml");
    let topology = agentenkit_queue::Topology::default();
    for queue in [topology.segments_queue(), topology.notifications_queue()] {
        assert!(
            keda.contains(&format!("queueName: {queue}")),
            "keda.yaml must scale on {queue}"
        );
    }
    assert!(deploy_file("k8s/pdb.yaml").contains("kind: PodDisruptionBudget"));
    let worker = deploy_file("k8s/worker.yaml");
    assert!(worker.contains("AGENTENKIT_SHUTDOWN_GRACE"));
}

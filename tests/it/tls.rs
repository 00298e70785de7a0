//! TLS to Postgres: libpq's `sslmode` values against the local server,
//! which runs with `ssl = on` (Debian's default, with its snakeoil
//! certificate, issued for the machine's host name and not for 127.0.0.1).

use agentenkit_store::{Store, StoreConfig};
use agentenkit_tests::database_url;

fn with_params(params: &str) -> String {
    let url = database_url();
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{params}")
}

fn store(params: &str) -> Store {
    let mut config = StoreConfig::new(with_params(params));
    config.max_connections = 1;
    Store::connect(&config).expect("store config")
}

/// The certificate the server presents, as a root to trust.
async fn server_certificate() -> String {
    let plain = store("sslmode=disable");
    let path = plain
        .setting("ssl_cert_file")
        .await
        .expect("SHOW ssl_cert_file");
    assert_eq!(
        plain.setting("ssl").await.unwrap(),
        "on",
        "these tests need the local Postgres to run with ssl = on"
    );
    path
}

#[tokio::test]
async fn sslmode_require_encrypts_and_disable_does_not() {
    let encrypted = store("sslmode=require");
    assert!(encrypted.connection_encrypted().await.unwrap());
    let plain = store("sslmode=disable");
    assert!(!plain.connection_encrypted().await.unwrap());
    // libpq's default (prefer) encrypts when the server offers it.
    let default = store("application_name=agentenkit-tls-test");
    assert!(default.connection_encrypted().await.unwrap());
}

#[tokio::test]
async fn verify_ca_checks_the_chain_and_verify_full_the_host_name_too() {
    let root = server_certificate().await;
    let chain_checked = store(&format!("sslmode=verify-ca&sslrootcert={root}"));
    assert!(chain_checked.connection_encrypted().await.unwrap());
    // The certificate names the machine, not 127.0.0.1.
    let full = store(&format!("sslmode=verify-full&sslrootcert={root}"));
    let refused = full.ready().await.unwrap_err().to_string();
    println!("verify-full: {refused}");
    assert!(refused.contains("not valid for name"), "{refused}");
    // The platform's roots do not hold the snakeoil certificate.
    let unknown = store("sslmode=verify-full")
        .ready()
        .await
        .unwrap_err()
        .to_string();
    println!("platform roots: {unknown}");
    assert!(unknown.contains("certificate"), "{unknown}");
}

/// A TLS terminator on 127.0.0.1 in front of `upstream`: what a broker's
/// TLS listener does, without reconfiguring the local broker.
async fn tls_proxy(upstream: String, config: rustls::ServerConfig) -> u16 {
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut broker) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut broker).await;
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn the_broker_is_reached_over_amqps_with_a_private_ca() {
    use agentenkit_core::{QueueMessage, RunId};
    use agentenkit_queue::rabbit::RabbitQueue;
    use agentenkit_queue::{QueueAdapter, Topology};
    use agentenkit_tests::providers::TestCertificates;
    use std::str::FromStr;
    use std::time::Duration;

    let plain = lapin::uri::AMQPUri::from_str(&agentenkit_tests::amqp_url()).unwrap();
    let upstream = format!("{}:{}", plain.authority.host, plain.authority.port);
    let issued = TestCertificates::issue();
    let port = tls_proxy(upstream, issued.server_config()).await;
    let url = format!(
        "amqps://{}:{}@localhost:{port}/{}",
        plain.authority.userinfo.username,
        plain.authority.userinfo.password,
        if plain.vhost == "/" {
            "%2f".to_owned()
        } else {
            plain.vhost.clone()
        },
    );
    let topology = Topology {
        prefix: format!("test.{}", uuid::Uuid::now_v7().simple()),
        queue_expires: Some(Duration::from_secs(60)),
        delay_lanes: vec![],
        ..Topology::default()
    };
    let queue = RabbitQueue::connect_with_ca(&url, topology.clone(), Some(issued.ca_pem.clone()))
        .await
        .expect("amqps with the CA");
    let mut deliveries = queue.consume(1).await.unwrap();
    let message = QueueMessage::Segment {
        run_id: RunId::new(),
        seq: 1,
    };
    queue.publish(&message).await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(10), deliveries.next())
        .await
        .expect("a delivery in time")
        .expect("a delivery");
    assert_eq!(delivery.message().unwrap(), message);
    delivery.ack().await.unwrap();
    queue.close().await;
    // Without the CA the certificate is not trusted: no connection, and no
    // fallback to plain text.
    let refused = RabbitQueue::connect(&url, topology).await.unwrap_err();
    assert!(
        refused.to_string().to_lowercase().contains("certificate")
            || refused.to_string().to_lowercase().contains("issuer"),
        "{refused}"
    );
}
